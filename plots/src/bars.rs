//! Grouped bars: one group per category on the x axis (a model, a GPU
//! type), one bar per series (a planner) in each, the legend beside the
//! plot. A run without a value (out of memory, infeasible) is a cross in
//! its slot; a value with an interval has an error bar.

use crate::render::{compact, entries, err, with_legend, DynErr, Figure};
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
    /// Series: name and one bar per category.
    pub series: Vec<(String, Vec<Bar>)>,
}

/// One slot of a grouped-bar figure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Bar {
    /// Nothing ran here (the sweep has no such case).
    Absent,
    /// It ran and has no value: out of memory or infeasible (a cross).
    Failed,
    /// A value, with its interval `(low, high)` when it has one.
    Value {
        /// Height.
        v: f64,
        /// Error bar.
        band: Option<(f64, f64)>,
    },
}

impl Bar {
    /// The drawable value and its interval.
    fn value(self) -> Option<(f64, Option<(f64, f64)>)> {
        match self {
            Bar::Value { v, band } if v.is_finite() && v > 0.0 => Some((
                v,
                band.filter(|b| b.0.is_finite() && b.1.is_finite() && b.0 <= b.1),
            )),
            _ => None,
        }
    }
}

impl Figure for GroupedBars {
    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> Result<(), DynErr>
    where
        DB::ErrorType: 'static,
    {
        let colours = entries(self.series.iter().map(|s| &s.0));
        let failed = self.series.iter().any(|s| s.1.contains(&Bar::Failed));
        let mut legend = colours.clone();
        if failed {
            legend.push(("x: no plan fits".into(), WHITE));
        }
        let plot = with_legend(&root, 250, "", &legend)?;
        let n = self.categories.len().max(1);
        let top = self
            .series
            .iter()
            .flat_map(|s| s.1.iter().filter_map(|b| b.value()))
            .map(|(v, band)| band.map_or(v, |b| b.1.max(v)))
            .fold(0.0f64, f64::max);
        let top = if top > 0.0 { top * 1.08 } else { 1.0 };
        let cats = self.categories.clone();
        // Category labels shrink (to 10 px at least) when the longest would
        // overrun its slot (about 0.55 em per character).
        let slot_px = plot.dim_in_pixel().0 as f64 * 0.85 / n as f64;
        let longest = cats
            .iter()
            .map(|c| c.chars().count())
            .max()
            .unwrap_or(1)
            .max(1);
        let label_px = (slot_px / (longest as f64 * 0.55)).clamp(10.0, 15.0);
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
            .y_label_formatter(&|v| compact(*v))
            .x_desc(&self.x_label)
            .y_desc(&self.y_label)
            .label_style(("sans-serif", 15))
            .x_label_style(("sans-serif", label_px))
            .axis_desc_style(("sans-serif", 18))
            .draw()
            .map_err(err)?;
        let k = self.series.len().max(1) as f64;
        let width = 0.8 / k;
        for (si, ((_, vals), (_, c))) in self.series.iter().zip(&colours).enumerate() {
            let slot = |ci: usize| ci as f64 - 0.4 + si as f64 * width;
            chart
                .draw_series(vals.iter().enumerate().filter_map(|(ci, b)| {
                    let (v, _) = b.value()?;
                    let x0 = slot(ci);
                    Some(Rectangle::new(
                        [(x0, 0.0), (x0 + width * 0.92, v)],
                        c.filled(),
                    ))
                }))
                .map_err(err)?;
            chart
                .draw_series(vals.iter().enumerate().filter_map(|(ci, b)| {
                    let (v, band) = b.value()?;
                    let (lo, hi) = band?;
                    let xm = slot(ci) + width * 0.46;
                    Some(ErrorBar::new_vertical(
                        xm,
                        lo,
                        v,
                        hi,
                        BLACK.stroke_width(1),
                        6,
                    ))
                }))
                .map_err(err)?;
            chart
                .draw_series(
                    vals.iter()
                        .enumerate()
                        .filter(|(_, b)| **b == Bar::Failed)
                        .map(|(ci, _)| {
                            Cross::new((slot(ci) + width * 0.46, top * 0.02), 7, c.stroke_width(3))
                        }),
                )
                .map_err(err)?;
        }
        plot.present().map_err(err)?;
        Ok(())
    }
}
