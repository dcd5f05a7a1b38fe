//! Lines: one series per planner (or strategy) over a numeric sweep axis
//! (GPUs, network bandwidth, global batch), optionally on log axes, with
//! the prediction's interval as a band where it has one, runs that did not
//! fit (out of memory, infeasible) marked with a cross on the x axis, and
//! the x ticks of a log axis at the swept values; the legend beside the
//! plot.

use crate::render::{compact, entries, err, with_legend, DynErr, Figure};
use plotters::coord::combinators::IntoLogRange;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// One point of a series.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// Position on the sweep axis.
    pub x: f64,
    /// The value (`None`: the run exists but has none: out of memory or
    /// infeasible; drawn as a cross on the x axis).
    pub y: Option<f64>,
    /// The value's interval `(low, high)`, drawn as a band.
    pub band: Option<(f64, f64)>,
}

/// One named series.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend entry (a planner keeps its colour across figures).
    pub name: String,
    /// Its points, in x order.
    pub points: Vec<Point>,
}

/// A line figure.
#[derive(Debug, Clone, PartialEq)]
pub struct Lines {
    /// Caption.
    pub title: String,
    /// X axis label (with unit).
    pub x_label: String,
    /// Y axis label (with unit).
    pub y_label: String,
    /// The series (non-finite values, and non-positive ones on a log
    /// axis, are treated as missing).
    pub series: Vec<Series>,
    /// Log x axis.
    pub log_x: bool,
    /// Log y axis.
    pub log_y: bool,
}

/// What one series draws: its line, its band, and where it failed.
struct Drawable {
    line: Vec<(f64, f64)>,
    band: Vec<(f64, f64, f64)>,
    failed: Vec<f64>,
}

impl Lines {
    fn ok(&self, x: f64, y: f64) -> bool {
        x.is_finite() && y.is_finite() && (!self.log_x || x > 0.0) && (!self.log_y || y > 0.0)
    }

    fn drawables(&self) -> Vec<Drawable> {
        self.series
            .iter()
            .map(|s| {
                let mut d = Drawable {
                    line: Vec::new(),
                    band: Vec::new(),
                    failed: Vec::new(),
                };
                for p in &s.points {
                    if !(p.x.is_finite() && (!self.log_x || p.x > 0.0)) {
                        continue;
                    }
                    match p.y.filter(|&y| self.ok(p.x, y)) {
                        Some(y) => {
                            d.line.push((p.x, y));
                            if let Some((lo, hi)) = p.band.filter(|&(lo, hi)| {
                                self.ok(p.x, lo) && self.ok(p.x, hi) && lo <= hi
                            }) {
                                d.band.push((p.x, lo, hi));
                            }
                        }
                        None => d.failed.push(p.x),
                    }
                }
                d
            })
            .collect()
    }

    /// The swept x values (every point's), sorted, distinct.
    fn xs(&self, ds: &[Drawable]) -> Vec<f64> {
        let mut xs: Vec<f64> = ds
            .iter()
            .flat_map(|d| d.line.iter().map(|p| p.0).chain(d.failed.iter().copied()))
            .collect();
        xs.sort_by(f64::total_cmp);
        xs.dedup();
        xs
    }

    fn plot<DB, X, Y>(
        &self,
        area: &DrawingArea<DB, Shift>,
        x: X,
        y: Y,
        (y0, y_top): (f64, f64),
        ds: &[Drawable],
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
        let xs = self.xs(ds);
        let log_x = self.log_x;
        let y_fmt = |v: &f64| compact(*v);
        let x_fmt = |v: &f64| if log_x { String::new() } else { compact(*v) };
        let mut mesh = chart.configure_mesh();
        mesh.x_desc(&self.x_label)
            .y_desc(&self.y_label)
            .y_label_formatter(&y_fmt)
            .x_label_formatter(&x_fmt)
            .label_style(("sans-serif", 15))
            .axis_desc_style(("sans-serif", 18));
        // A log x axis labels the swept values themselves (drawn below),
        // not decades none of them is.
        if log_x {
            mesh.disable_x_mesh();
        }
        mesh.draw().map_err(err)?;
        let root = area.strip_coord_spec();
        if log_x {
            let at = |v: f64| {
                (
                    chart.backend_coord(&(v, y0)),
                    chart.backend_coord(&(v, y_top)).1,
                )
            };
            swept_ticks(&root, &xs, at)?;
        }
        let colours = entries(self.series.iter().map(|s| &s.name));
        for (d, (_, c)) in ds.iter().zip(&colours) {
            if d.band.len() >= 2 {
                let mut poly: Vec<(f64, f64)> = d.band.iter().map(|b| (b.0, b.1)).collect();
                poly.extend(d.band.iter().rev().map(|b| (b.0, b.2)));
                chart
                    .draw_series(std::iter::once(Polygon::new(poly, c.mix(0.15).filled())))
                    .map_err(err)?;
            }
            chart
                .draw_series(LineSeries::new(d.line.iter().copied(), c.stroke_width(2)))
                .map_err(err)?;
            chart
                .draw_series(d.line.iter().map(|&q| Circle::new(q, 4, c.filled())))
                .map_err(err)?;
        }
        let at = |x: f64| chart.backend_coord(&(x, y0));
        failed_crosses(&root, ds, &colours, at)?;
        area.present().map_err(err)?;
        Ok(())
    }
}

/// Ticks, light grid lines and labels at the swept values of a log x
/// axis (`at(v)`: the pixel of `(v, bottom)` and the top's pixel row).
fn swept_ticks<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    xs: &[f64],
    at: impl Fn(f64) -> ((i32, i32), i32),
) -> Result<(), DynErr>
where
    DB::ErrorType: 'static,
{
    let skip = label_stride(xs.len());
    for (i, &v) in xs.iter().enumerate() {
        let ((px, py), top) = at(v);
        root.draw(&PathElement::new(
            vec![(px, top), (px, py)],
            RGBColor(225, 225, 225),
        ))
        .map_err(err)?;
        root.draw(&PathElement::new(vec![(px, py), (px, py + 5)], BLACK))
            .map_err(err)?;
        if i % skip == 0 {
            let style = ("sans-serif", 15)
                .into_font()
                .color(&BLACK)
                .pos(Pos::new(HPos::Center, VPos::Top));
            root.draw(&Text::new(compact(v), (px, py + 8), style))
                .map_err(err)?;
        }
    }
    Ok(())
}

/// Crosses on the x axis (`at(x)`: its pixel) for runs without a value,
/// stacked upwards where several series fail at one x so every colour
/// shows.
fn failed_crosses<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    ds: &[Drawable],
    colours: &[(String, RGBColor)],
    at: impl Fn(f64) -> (i32, i32),
) -> Result<(), DynErr>
where
    DB::ErrorType: 'static,
{
    let mut stacked: Vec<(f64, i32)> = Vec::new();
    for (d, (_, c)) in ds.iter().zip(colours) {
        for &x in &d.failed {
            let k = match stacked.iter_mut().find(|s| s.0 == x) {
                Some(s) => {
                    s.1 += 1;
                    s.1
                }
                None => {
                    stacked.push((x, 0));
                    0
                }
            };
            let (px, py) = at(x);
            root.draw(&Cross::new((px, py - 14 * k), 7, c.stroke_width(3)))
                .map_err(err)?;
        }
    }
    Ok(())
}

/// Every how many swept values a log axis labels (the ticks are all
/// drawn): at most 12 labels, so neighbours never overlap.
fn label_stride(n: usize) -> usize {
    n.div_ceil(12).max(1)
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
        let ds = self.drawables();
        let mut legend = entries(self.series.iter().map(|s| &s.name));
        if ds.iter().any(|d| !d.failed.is_empty()) {
            legend.push(("x on the axis: no plan fits".into(), WHITE));
        }
        let plot = with_legend(&root, 250, "", &legend)?;
        let xs = self.xs(&ds);
        let (x0, x1) = range(xs.iter().copied(), self.log_x, false);
        let ys = ds.iter().flat_map(|d| {
            d.line
                .iter()
                .map(|p| p.1)
                .chain(d.band.iter().flat_map(|b| [b.1, b.2]))
        });
        let (y0, y1) = range(ys, self.log_y, true);
        match (self.log_x, self.log_y) {
            (true, true) => self.plot(
                &plot,
                (x0..x1).log_scale(),
                (y0..y1).log_scale(),
                (y0, y1),
                &ds,
            ),
            (true, false) => self.plot(&plot, (x0..x1).log_scale(), y0..y1, (y0, y1), &ds),
            (false, true) => self.plot(&plot, x0..x1, (y0..y1).log_scale(), (y0, y1), &ds),
            (false, false) => self.plot(&plot, x0..x1, y0..y1, (y0, y1), &ds),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_values_become_crosses_and_bands_stay_with_their_points() {
        let l = Lines {
            title: String::new(),
            x_label: String::new(),
            y_label: String::new(),
            series: vec![Series {
                name: "fsdp".into(),
                points: vec![
                    Point {
                        x: 8.0,
                        y: Some(1.0),
                        band: Some((0.9, 1.1)),
                    },
                    Point {
                        x: 16.0,
                        y: None,
                        band: None,
                    },
                    Point {
                        x: 32.0,
                        y: Some(f64::NAN),
                        band: None,
                    },
                    Point {
                        x: -1.0,
                        y: Some(2.0),
                        band: None,
                    },
                ],
            }],
            log_x: true,
            log_y: false,
        };
        let d = &l.drawables()[0];
        assert_eq!(d.line, [(8.0, 1.0)]);
        assert_eq!(d.band, [(8.0, 0.9, 1.1)]);
        assert_eq!(d.failed, [16.0, 32.0]);
        assert_eq!(l.xs(&l.drawables()), [8.0, 16.0, 32.0]);
        assert_eq!(label_stride(5), 1);
        assert_eq!(label_stride(30), 3);
    }
}
