// Enhancement only: every page works without it. A section marked data-refresh is fetched
// again every 2 s and swapped in place, so that the page follows what happens without a
// reload; nothing is fetched from anywhere but this server.
"use strict";
// A page whose refreshes fail says so above its content, from when, until one succeeds: what
// it shows is no longer what happens, and a page that looks live should not hide it.
const staleness = (function () {
  let since = null;
  return {
    failed(why) {
      since = since || new Date();
      let note = document.getElementById("stale");
      if (!note) {
        note = document.createElement("p");
        note.id = "stale";
        note.className = "stale";
        note.setAttribute("role", "status");
        const main = document.querySelector("main");
        (main || document.body).prepend(note);
      }
      note.textContent = "Not up to date since " + since.toLocaleTimeString() + ": " + why +
        "; trying again.";
    },
    answered() {
      since = null;
      const note = document.getElementById("stale");
      if (note) {
        note.remove();
      }
    },
  };
})();
(function () {
  const sections = document.querySelectorAll("[data-refresh][id]");
  if (sections.length === 0) {
    return;
  }
  // One refresh at a time: while Redis is slow to answer, a tick that found the last one still
  // waiting skips, rather than piling requests on a server that is already waiting.
  let waiting = false;
  async function refresh() {
    if (waiting) {
      return;
    }
    waiting = true;
    try {
      const response = await fetch(window.location.href, {
        headers: { "Accept": "text/html" },
        credentials: "same-origin",
      });
      if (!response.ok) {
        staleness.failed("the server answered " + response.status);
        return;
      }
      staleness.answered();
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
      staleness.failed("the server cannot be reached");
    } finally {
      waiting = false;
    }
  }
  window.setInterval(refresh, 2000);
})();
// A running run's output: the element marked data-live-output is filled every second from the
// API's run (its output so far, which the worker writes at most once a second and bounds to
// its tail); once the run no longer runs, the page is loaded again to show how it ended.
(function () {
  const output = document.querySelector("[data-live-output]");
  if (!output) {
    return;
  }
  const source = output.getAttribute("data-live-output");
  let waiting = false;
  async function follow() {
    if (waiting) {
      return;
    }
    waiting = true;
    try {
      const response = await fetch(source, {
        headers: { "Accept": "application/json" },
        credentials: "same-origin",
      });
      if (!response.ok) {
        staleness.failed("the server answered " + response.status);
        return;
      }
      staleness.answered();
      const run = await response.json();
      if (run.state !== "active") {
        window.clearInterval(timer);
        window.location.reload();
        return;
      }
      if (run.output_so_far && output.textContent !== run.output_so_far.output) {
        output.textContent = run.output_so_far.output;
      }
    } catch (error) {
      // The server is restarting or unreachable: the next tick tries again.
      staleness.failed("the server cannot be reached");
    } finally {
      waiting = false;
    }
  }
  const timer = window.setInterval(follow, 1000);
})();
