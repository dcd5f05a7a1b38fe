//! Stacked bars: one bar per GPU (grouped by planner, a gap between
//! groups), stacked by part (compute, recompute, exposed communication,
//! copies, idle; or memory by component); the legend beside the plot.

use crate::render::{color, entries, err, with_legend, DynErr, Figure};
use plotters::coord::Shift;
use plotters::prelude::*;

/// A stacked-bar figure.
#[derive(Debug, Clone, PartialEq)]
pub struct StackedBars {
    /// Caption.
    pub title: String,
    /// Y axis label (with unit).
    pub y_label: String,
    /// Groups in order: a label (under the group) and its bars' labels.
    pub groups: Vec<(String, Vec<String>)>,
    /// Parts bottom to top: name and one value per bar (groups flattened).
    pub parts: Vec<(String, Vec<f64>)>,
}

impl StackedBars {
    /// Bars in order with their x position (a one-bar gap between groups).
    fn positions(&self) -> Vec<(f64, String, usize)> {
        let mut v = Vec::new();
        let mut x = 0.0;
        for (gi, (_, bars)) in self.groups.iter().enumerate() {
            for b in bars {
                v.push((x, b.clone(), gi));
                x += 1.0;
            }
            x += 1.0;
        }
        v
    }
}

impl Figure for StackedBars {
    fn size(&self) -> (u32, u32) {
        (1400, 750)
    }

    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> Result<(), DynErr>
    where
        DB::ErrorType: 'static,
    {
        let entries = entries(self.parts.iter().map(|s| &s.0));
        let plot = with_legend(&root, 230, "", &entries)?;
        let pos = self.positions();
        let n = pos.len();
        let totals: Vec<f64> = (0..n)
            .map(|b| {
                self.parts
                    .iter()
                    .map(|p| p.1.get(b).copied().unwrap_or(0.0).max(0.0))
                    .sum()
            })
            .collect();
        let top = totals.iter().copied().fold(0.0f64, f64::max);
        let top = if top > 0.0 { top * 1.12 } else { 1.0 };
        let xmax = pos.last().map_or(1.0, |p| p.0 + 0.5);
        let (upper, lower) = plot.split_vertically(plot.dim_in_pixel().1.saturating_sub(40));
        let labels: Vec<(f64, String)> = pos.iter().map(|p| (p.0, p.1.clone())).collect();
        let mut chart = ChartBuilder::on(&upper)
            .caption(&self.title, ("sans-serif", 24))
            .margin(15)
            .x_label_area_size(60)
            .y_label_area_size(80)
            .build_cartesian_2d(-0.5f64..xmax, 0.0f64..top)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(4 * n + 4)
            .x_label_formatter(&|x| {
                labels
                    .iter()
                    .find(|l| (l.0 - x).abs() < 1e-6)
                    .map(|l| l.1.clone())
                    .unwrap_or_default()
            })
            .y_desc(&self.y_label)
            .label_style(("sans-serif", 13))
            .axis_desc_style(("sans-serif", 18))
            .draw()
            .map_err(err)?;
        for (b, (x, _, _)) in pos.iter().enumerate() {
            let mut y = 0.0;
            for (pi, (_, vals)) in self.parts.iter().enumerate() {
                let v = vals.get(b).copied().unwrap_or(0.0).max(0.0);
                if v > 0.0 {
                    chart
                        .draw_series(std::iter::once(Rectangle::new(
                            [(x - 0.4, y), (x + 0.4, y + v)],
                            color(pi).filled(),
                        )))
                        .map_err(err)?;
                }
                y += v;
            }
        }
        // Group names under their bars.
        let (w, _) = lower.dim_in_pixel();
        let px = |x: f64| 95.0 + (x + 0.5) / (xmax + 0.5) * (w as f64 - 110.0);
        let mut at = 0;
        for (name, bars) in &self.groups {
            if bars.is_empty() {
                continue;
            }
            let mid = (pos[at].0 + pos[at + bars.len() - 1].0) / 2.0;
            lower
                .draw(&Text::new(
                    name.clone(),
                    (px(mid) as i32 - 4 * name.len() as i32, 8),
                    ("sans-serif", 17).into_font(),
                ))
                .map_err(err)?;
            at += bars.len();
        }
        root.present().map_err(err)?;
        Ok(())
    }
}
