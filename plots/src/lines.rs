//! Lines: one series per planner (or strategy) over a numeric sweep axis
//! (GPUs, network bandwidth, global batch), optionally on log axes; the
//! legend beside the plot.

use crate::render::{color, entries, err, with_legend, DynErr, Figure};
use plotters::coord::combinators::IntoLogRange;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;

/// A line figure.
#[derive(Debug, Clone, PartialEq)]
pub struct Lines {
    /// Caption.
    pub title: String,
    /// X axis label (with unit).
    pub x_label: String,
    /// Y axis label (with unit).
    pub y_label: String,
    /// Series: name and (x, y) points (non-finite, and non-positive on a
    /// log axis, are skipped).
    pub series: Vec<(String, Vec<(f64, f64)>)>,
    /// Log x axis.
    pub log_x: bool,
    /// Log y axis.
    pub log_y: bool,
}

impl Lines {
    fn points(&self) -> Vec<Vec<(f64, f64)>> {
        self.series
            .iter()
            .map(|s| {
                s.1.iter()
                    .copied()
                    .filter(|&(x, y)| {
                        x.is_finite()
                            && y.is_finite()
                            && (!self.log_x || x > 0.0)
                            && (!self.log_y || y > 0.0)
                    })
                    .collect()
            })
            .collect()
    }

    fn plot<DB, X, Y>(
        &self,
        area: &DrawingArea<DB, Shift>,
        x: X,
        y: Y,
        pts: &[Vec<(f64, f64)>],
    ) -> Result<(), DynErr>
    where
        DB: DrawingBackend,
        DB::ErrorType: 'static,
        X: AsRangedCoord<Value = f64>,
        Y: AsRangedCoord<Value = f64>,
        X::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
        Y::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
    {
        let mut chart = ChartBuilder::on(area)
            .caption(&self.title, ("sans-serif", 24))
            .margin(15)
            .x_label_area_size(50)
            .y_label_area_size(80)
            .build_cartesian_2d(x, y)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc(&self.x_label)
            .y_desc(&self.y_label)
            .label_style(("sans-serif", 15))
            .axis_desc_style(("sans-serif", 18))
            .draw()
            .map_err(err)?;
        for (i, p) in pts.iter().enumerate() {
            let c = color(i);
            chart
                .draw_series(LineSeries::new(p.iter().copied(), c.stroke_width(2)))
                .map_err(err)?;
            chart
                .draw_series(p.iter().map(|&q| Circle::new(q, 4, c.filled())))
                .map_err(err)?;
        }
        area.present().map_err(err)?;
        Ok(())
    }
}

/// `[lo, hi]` padded for a linear or log axis.
fn range(v: impl Iterator<Item = f64>, log: bool, from_zero: bool) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for x in v {
        lo = lo.min(x);
        hi = hi.max(x);
    }
    if !lo.is_finite() {
        return (1.0, 10.0);
    }
    if log {
        (lo / 1.3, hi * 1.3)
    } else if from_zero {
        (0.0, if hi > 0.0 { hi * 1.08 } else { 1.0 })
    } else {
        let pad = ((hi - lo) * 0.05).max(hi.abs() * 0.01).max(1e-9);
        (lo - pad, hi + pad)
    }
}

impl Figure for Lines {
    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> Result<(), DynErr>
    where
        DB::ErrorType: 'static,
    {
        let entries = entries(self.series.iter().map(|s| &s.0));
        let plot = with_legend(&root, 250, "", &entries)?;
        let pts = self.points();
        let (x0, x1) = range(pts.iter().flatten().map(|p| p.0), self.log_x, false);
        let (y0, y1) = range(pts.iter().flatten().map(|p| p.1), self.log_y, true);
        match (self.log_x, self.log_y) {
            (true, true) => self.plot(&plot, (x0..x1).log_scale(), (y0..y1).log_scale(), &pts),
            (true, false) => self.plot(&plot, (x0..x1).log_scale(), y0..y1, &pts),
            (false, true) => self.plot(&plot, x0..x1, (y0..y1).log_scale(), &pts),
            (false, false) => self.plot(&plot, x0..x1, y0..y1, &pts),
        }
    }
}
