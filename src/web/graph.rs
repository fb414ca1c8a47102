//! A workflow instance's steps as a graph, inline SVG rendered on the server: steps in layers
//! left to right (a step one layer right of the last step it needs), each a box that names it
//! and says its state in words and by colour, and a path from each need to the step after it.

use maud::{Markup, html};

use crate::store::{StepInstance, StepStatus};

/// The most steps a graph draws, so that a page stays readable; the steps' table lists all.
pub const MAX_STEPS: usize = 100;

/// The longest name a box shows whole; a longer one is cut, and its `<title>` says it all.
const LABEL_CHARS: usize = 18;

/// A box's size in SVG units, and the space between layers and between boxes of one layer.
const WIDTH: f64 = 150.0;
const HEIGHT: f64 = 44.0;
const LAYER_GAP: f64 = 50.0;
const ROW_GAP: f64 = 16.0;

/// The CSS class that colours a step's state: `step-` and its word. The stylesheet sets the
/// box's `stroke` per theme; without it the state is still written in the box.
pub fn class(status: StepStatus) -> String {
    format!("step-{}", status.as_str())
}

/// The layer of each step: 0 for one that needs none, else one more than the deepest step it
/// needs. A need that names no step (or a cycle, which a declared workflow cannot have) counts
/// as no need, so a damaged instance still draws.
fn layers(steps: &[StepInstance]) -> Vec<usize> {
    let mut layer = vec![0; steps.len()];
    // Each pass settles at least one more step of the longest chain: as many passes as steps.
    for _ in 0..steps.len() {
        let mut changed = false;
        for (index, step) in steps.iter().enumerate() {
            let deepest = step
                .needs
                .iter()
                .filter_map(|need| steps.iter().position(|other| other.name == *need))
                .filter(|need| *need != index)
                .map(|need| layer[need] + 1)
                .max()
                .unwrap_or(0);
            if deepest != layer[index] && deepest < steps.len() {
                layer[index] = deepest;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    layer
}

/// `name` cut to [`LABEL_CHARS`], with an ellipsis when cut.
fn label(name: &str) -> String {
    if name.chars().count() <= LABEL_CHARS {
        name.to_owned()
    } else {
        let cut: String = name.chars().take(LABEL_CHARS - 1).collect();
        format!("{cut}…")
    }
}

/// The first [`MAX_STEPS`] of `steps` (in their declared order) as a graph; `subject` names
/// the instance in its summary.
pub fn step_graph(subject: &str, steps: &[StepInstance]) -> Markup {
    let shown = &steps[..steps.len().min(MAX_STEPS)];
    let layer = layers(shown);
    // A box's place: its layer across, its rank among the steps of its layer down.
    let mut rank = vec![0usize; shown.len()];
    let mut filled = vec![0usize; shown.len() + 1];
    for (index, at) in layer.iter().enumerate() {
        rank[index] = filled[*at];
        filled[*at] += 1;
    }
    let columns = layer.iter().max().map_or(1, |deepest| deepest + 1);
    let rows = filled.iter().copied().max().unwrap_or(1).max(1);
    let x = |index: usize| layer[index] as f64 * (WIDTH + LAYER_GAP);
    let y = |index: usize| rank[index] as f64 * (HEIGHT + ROW_GAP);
    let width = columns as f64 * (WIDTH + LAYER_GAP) - LAYER_GAP;
    let height = rows as f64 * (HEIGHT + ROW_GAP) - ROW_GAP;
    let mut counts: Vec<String> = Vec::new();
    for status in StepStatus::ALL {
        let count = shown.iter().filter(|step| step.status == *status).count();
        if count > 0 {
            counts.push(format!("{count} {}", status.as_str()));
        }
    }
    let summary = if shown.is_empty() {
        format!("{subject}: no steps")
    } else {
        let mut summary = format!("{subject}: {} steps: {}", shown.len(), counts.join(", "));
        if steps.len() > shown.len() {
            summary.push_str(&format!(
                " (the first {} of {} drawn)",
                shown.len(),
                steps.len()
            ));
        }
        summary
    };
    let layer = &layer;
    let edges: Vec<(usize, usize)> = shown
        .iter()
        .enumerate()
        .flat_map(|(index, step)| {
            step.needs
                .iter()
                .filter_map(|need| shown.iter().position(|other| other.name == *need))
                .filter(move |need| layer[*need] < layer[index])
                .map(move |need| (need, index))
        })
        .collect();
    html! {
        svg class="graph" viewBox={ "0 0 " (width.max(WIDTH)) " " (height.max(HEIGHT)) }
            width=(width.max(WIDTH)) role="img" aria-label=(summary) {
            title { (summary) }
            @for (from, to) in &edges {
                @let (x1, y1) = (x(*from) + WIDTH, y(*from) + HEIGHT / 2.0);
                @let (x2, y2) = (x(*to), y(*to) + HEIGHT / 2.0);
                @let middle = f64::midpoint(x1, x2);
                path class="edge" fill="none" stroke="currentColor" stroke-opacity="0.5"
                    d={ "M" (x1) " " (y1) " C" (middle) " " (y1) " " (middle) " " (y2) " " (x2) " " (y2) } {}
            }
            @for (index, step) in shown.iter().enumerate() {
                g class={ "step " (class(step.status)) } {
                    title { "step " (step.name) " (job " (step.job) "): " (step.status.as_str()) }
                    rect x=(x(index) + 1.0) y=(y(index) + 1.0) width=(WIDTH - 2.0) height=(HEIGHT - 2.0)
                        rx="6" fill="none" stroke="currentColor" stroke-width="2" {}
                    text x=(x(index) + 10.0) y=(y(index) + 19.0) font-size="13" fill="currentColor" {
                        (label(&step.name))
                    }
                    text class="state" x=(x(index) + 10.0) y=(y(index) + 36.0) font-size="11"
                        fill="currentColor" { (step.status.as_str()) }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::web::chart::tests::elements;

    fn step(name: &str, needs: &[&str], status: StepStatus) -> StepInstance {
        StepInstance {
            name: name.to_owned(),
            job: name.to_owned(),
            needs: needs.iter().map(|need| (*need).to_owned()).collect(),
            status,
            run_id: None,
            changed_ms: None,
            error: None,
        }
    }

    #[test]
    fn a_fan_out_and_in_is_drawn_in_three_layers_with_an_edge_per_need() {
        let steps = [
            step("fetch", &[], StepStatus::Succeeded),
            step("left", &["fetch"], StepStatus::Failed),
            step("right", &["fetch"], StepStatus::Succeeded),
            step("merge", &["left", "right"], StepStatus::Skipped),
        ];
        assert_eq!(layers(&steps), [0, 1, 1, 2]);
        let svg = step_graph("report", &steps).into_string();
        let elements = elements(&svg);
        assert_eq!(elements.iter().filter(|name| *name == "rect").count(), 4);
        assert_eq!(elements.iter().filter(|name| *name == "path").count(), 4);
        assert!(
            svg.contains(
                "<g class=\"step step-failed\"><title>step left (job left): failed</title>"
            ),
            "{svg}"
        );
        assert!(
            svg.contains("aria-label=\"report: 4 steps: 2 succeeded, 1 failed, 1 skipped\""),
            "{svg}"
        );
        // merge is in the third layer, below nothing: x = 2 * (150 + 50).
        assert!(svg.contains("<rect x=\"401\" y=\"1\""), "{svg}");
    }

    #[test]
    fn a_graph_of_many_steps_is_bounded_and_long_names_are_cut() {
        let names: Vec<String> = (0..500)
            .map(|index| format!("a-very-long-step-name-{index}"))
            .collect();
        let steps: Vec<StepInstance> = names
            .iter()
            .enumerate()
            .map(|(index, name)| {
                let needs: Vec<&str> = if index == 0 {
                    vec![]
                } else {
                    vec![names[index - 1].as_str()]
                };
                step(name, &needs, StepStatus::Pending)
            })
            .collect();
        let svg = step_graph("long", &steps).into_string();
        let elements = elements(&svg);
        assert_eq!(
            elements.iter().filter(|name| *name == "rect").count(),
            MAX_STEPS
        );
        assert!(svg.contains("(the first 100 of 500 drawn)"), "{svg}");
        assert!(svg.contains(">a-very-long-step-…</text>"), "{svg}");
    }

    #[test]
    fn a_need_that_names_no_step_or_a_cycle_still_draws() {
        let steps = [
            step("a", &["b", "gone"], StepStatus::Pending),
            step("b", &["a"], StepStatus::Pending),
        ];
        let svg = step_graph("odd", &steps).into_string();
        assert_eq!(
            elements(&svg).iter().filter(|name| *name == "rect").count(),
            2
        );
    }

    #[test]
    fn hostile_step_names_are_text() {
        let steps = [step("<script>alert(1)</script>", &[], StepStatus::Running)];
        let svg = step_graph("<b>x</b>", &steps).into_string();
        assert!(!svg.contains("<script"), "{svg}");
        assert!(!svg.contains("<b>"), "{svg}");
        elements(&svg);
    }
}
