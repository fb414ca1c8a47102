// Enhancement only: every page works without it. A section marked data-refresh is fetched
// again every 2 s and swapped in place, so that the page follows what happens without a
// reload; nothing is fetched from anywhere but this server.
"use strict";
(function () {
  const sections = document.querySelectorAll("[data-refresh][id]");
  if (sections.length === 0) {
    return;
  }
  async function refresh() {
    try {
      const response = await fetch(window.location.href, {
        headers: { "Accept": "text/html" },
        credentials: "same-origin",
      });
      if (!response.ok) {
        return;
      }
      const page = new DOMParser().parseFromString(await response.text(), "text/html");
      for (const section of document.querySelectorAll("[data-refresh][id]")) {
        const fresh = page.getElementById(section.id);
        // A section holding the focus is left alone: swapping it would move the user's place.
        if (fresh && !section.contains(document.activeElement)) {
          section.replaceWith(document.adoptNode(fresh));
        }
      }
    } catch (error) {
      // The server is restarting or unreachable: the next tick tries again.
    }
  }
  window.setInterval(refresh, 2000);
})();
