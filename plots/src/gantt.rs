//! A Gantt timeline of one iteration: one lane per GPU stream (compute,
//! communication, copies), spans coloured by activity (forward, backward,
//! recompute, optimizer, collectives, transfers, copies); empty time on a
//! compute lane is waiting. Lanes of one GPU are adjacent; a pipeline's
//! lanes carry their stage in the label.

use crate::render::{color, entries, err, with_legend, DynErr, Figure};
use plotters::coord::Shift;
use plotters::prelude::*;

/// One span on a lane.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    /// Lane index.
    pub lane: usize,
    /// Start, ms.
    pub start_ms: f64,
    /// End, ms.
    pub end_ms: f64,
    /// Activity index into [`Gantt::kinds`].
    pub kind: usize,
}

/// A Gantt figure.
#[derive(Debug, Clone, PartialEq)]
pub struct Gantt {
    /// Caption.
    pub title: String,
    /// Lane labels, top to bottom.
    pub lanes: Vec<String>,
    /// Activities (legend entries, colours by index).
    pub kinds: Vec<String>,
    /// The spans.
    pub spans: Vec<Span>,
}

impl Figure for Gantt {
    fn size(&self) -> (u32, u32) {
        (1500, (160 + 26 * self.lanes.len() as u32).clamp(400, 1600))
    }

    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> Result<(), DynErr>
    where
        DB::ErrorType: 'static,
    {
        let entries = entries(self.kinds.iter());
        let plot = with_legend(&root, 200, "", &entries)?;
        let end = self.spans.iter().map(|s| s.end_ms).fold(0.0f64, f64::max);
        let end = if end > 0.0 { end * 1.02 } else { 1.0 };
        let n = self.lanes.len().max(1);
        let lanes = self.lanes.clone();
        let mut chart = ChartBuilder::on(&plot)
            .caption(&self.title, ("sans-serif", 24))
            .margin(15)
            .x_label_area_size(50)
            .y_label_area_size(330)
            .build_cartesian_2d(0.0f64..end, 0.0f64..n as f64)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(2 * n + 1)
            .y_label_formatter(&|y| {
                // Lane i is drawn in [n - i - 1, n - i]; label its centre.
                let k = y - y.floor();
                if (k - 0.5).abs() < 1e-6 {
                    let i = n as f64 - y - 0.5;
                    lanes.get(i.round() as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .x_desc("time in the iteration (ms)")
            .label_style(("sans-serif", 13))
            .axis_desc_style(("sans-serif", 18))
            .draw()
            .map_err(err)?;
        chart
            .draw_series(
                self.spans
                    .iter()
                    .filter(|s| s.end_ms > s.start_ms)
                    .map(|s| {
                        let y = (n - s.lane - 1) as f64;
                        Rectangle::new(
                            [(s.start_ms, y + 0.12), (s.end_ms, y + 0.88)],
                            color(s.kind).filled(),
                        )
                    }),
            )
            .map_err(err)?;
        root.present().map_err(err)?;
        Ok(())
    }
}
