//! Grouped bars: one group per category on the x axis (a model, a GPU
//! type), one bar per series (a planner) in each, the legend beside the
//! plot. A missing value (out of memory, infeasible) leaves its slot empty
//! and the caption says what that means.

use crate::render::{color, entries, err, with_legend, DynErr, Figure};
use plotters::coord::Shift;
use plotters::prelude::*;

/// A grouped-bar figure.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupedBars {
    /// Caption.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label (with unit).
    pub y_label: String,
    /// Categories along x, in order.
    pub categories: Vec<String>,
    /// Series: name and one value per category (`None`: no bar).
    pub series: Vec<(String, Vec<Option<f64>>)>,
}

impl Figure for GroupedBars {
    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> Result<(), DynErr>
    where
        DB::ErrorType: 'static,
    {
        let entries = entries(self.series.iter().map(|s| &s.0));
        let plot = with_legend(&root, 250, "", &entries)?;
        let n = self.categories.len().max(1);
        let top = self
            .series
            .iter()
            .flat_map(|s| s.1.iter().flatten())
            .copied()
            .filter(|v| v.is_finite())
            .fold(0.0f64, f64::max);
        let top = if top > 0.0 { top * 1.08 } else { 1.0 };
        let cats = self.categories.clone();
        let mut chart = ChartBuilder::on(&plot)
            .caption(&self.title, ("sans-serif", 24))
            .margin(15)
            .x_label_area_size(50)
            .y_label_area_size(80)
            .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0.0f64..top)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n)
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 0.0 {
                    cats.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .x_desc(&self.x_label)
            .y_desc(&self.y_label)
            .label_style(("sans-serif", 15))
            .axis_desc_style(("sans-serif", 18))
            .draw()
            .map_err(err)?;
        let k = self.series.len().max(1) as f64;
        let width = 0.8 / k;
        for (si, (_, vals)) in self.series.iter().enumerate() {
            let c = color(si);
            chart
                .draw_series(vals.iter().enumerate().filter_map(|(ci, v)| {
                    let v = (*v).filter(|v| v.is_finite() && *v > 0.0)?;
                    let x0 = ci as f64 - 0.4 + si as f64 * width;
                    Some(Rectangle::new(
                        [(x0, 0.0), (x0 + width * 0.92, v)],
                        c.filled(),
                    ))
                }))
                .map_err(err)?;
        }
        plot.present().map_err(err)?;
        Ok(())
    }
}
