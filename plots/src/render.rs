//! Rendering one drawing as `<base>.png` and `<base>.svg` in memory (every
//! figure module draws through this; the caller writes the files), and the
//! colours figures share.

use image::ImageEncoder;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::error::Error;
use std::path::{Path, PathBuf};

/// Error of a figure (plotters' backends' errors, PNG encoding).
pub type DynErr = Box<dyn Error + Send + Sync>;

/// A figure that can draw itself on any plotters backend.
pub trait Figure {
    /// Size in pixels.
    fn size(&self) -> (u32, u32) {
        (1200, 700)
    }
    /// Draws the figure on `root`.
    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> Result<(), DynErr>
    where
        DB::ErrorType: 'static;
}

/// One rendered file: the path it belongs at and its bytes. Figures are
/// drawn in memory; the caller writes them (the CLI through its one output
/// writer, so a figure path behaves like every other output path).
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    /// Where the file belongs (`<base>.png` or `<base>.svg`).
    pub path: PathBuf,
    /// The encoded PNG or SVG.
    pub bytes: Vec<u8>,
}

/// Renders `fig` as `<base>.png` and `<base>.svg` (in memory; nothing is
/// written).
pub fn render<F: Figure>(fig: &F, base: &Path) -> Result<Vec<Rendered>, DynErr> {
    // Appended, not `with_extension`: names such as `time-gpt2.7b` keep their dot.
    let png = PathBuf::from(format!("{}.png", base.display()));
    let svg = PathBuf::from(format!("{}.svg", base.display()));
    render_to(fig, png, svg)
}

/// Renders `fig` as a PNG and an SVG (in memory) meant for the given paths.
pub fn render_to<F: Figure>(fig: &F, png: PathBuf, svg: PathBuf) -> Result<Vec<Rendered>, DynErr> {
    let (w, h) = fig.size();
    let mut rgb = vec![0u8; w as usize * h as usize * 3];
    fig.draw(BitMapBackend::with_buffer(&mut rgb, (w, h)).into_drawing_area())?;
    // The encoder and settings plotters' file backend uses (image's default
    // PNG encoder), so a figure's bytes do not depend on where it goes.
    let mut png_bytes = Vec::new();
    image::codecs::png::PngEncoder::new(&mut png_bytes).write_image(
        &rgb,
        w,
        h,
        image::ColorType::Rgb8,
    )?;
    let mut svg_text = String::new();
    fig.draw(SVGBackend::with_string(&mut svg_text, (w, h)).into_drawing_area())?;
    Ok(vec![
        Rendered {
            path: png,
            bytes: png_bytes,
        },
        Rendered {
            path: svg,
            bytes: svg_text.into_bytes(),
        },
    ])
}

/// The `i`-th series colour (a qualitative palette, stable across figures).
pub fn color(i: usize) -> RGBColor {
    // Tableau 10, then 6 darker companions: 16 distinct series.
    const P: [RGBColor; 16] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
        RGBColor(188, 189, 34),
        RGBColor(23, 190, 207),
        RGBColor(0, 0, 0),
        RGBColor(120, 60, 0),
        RGBColor(0, 90, 50),
        RGBColor(100, 0, 100),
        RGBColor(0, 60, 130),
        RGBColor(170, 170, 60),
    ];
    P[i % P.len()]
}

/// Converts a plotters error to [`DynErr`].
pub fn err<E: std::fmt::Display>(e: E) -> DynErr {
    e.to_string().into()
}

/// Legend entries for `names`: a planner of the registry in its own
/// colour (its place in the registry, so one planner has one colour in
/// every figure), any other series in order.
pub fn entries<'a>(names: impl Iterator<Item = &'a String>) -> Vec<(String, RGBColor)> {
    let planners = sim::planner::registry::names(|_| true);
    names
        .enumerate()
        .map(|(i, n)| {
            let c = match planners.iter().position(|p| p == n) {
                Some(k) => color(k),
                None => color(i),
            };
            (n.clone(), c)
        })
        .collect()
}

/// A tick label: integers as integers (`1024`), large values with a
/// suffix (`12.5k`, `3M`), others to three significant digits (`0.25`),
/// never `100.0`.
pub fn compact(v: f64) -> String {
    fn trim(x: f64, digits: usize) -> String {
        let s = format!("{x:.digits$}");
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    }
    if !v.is_finite() {
        return String::new();
    }
    let a = v.abs();
    if a >= 1e6 {
        format!("{}M", trim(v / 1e6, 2))
    } else if a >= 1e4 {
        format!("{}k", trim(v / 1e3, 1))
    } else if (v - v.round()).abs() < 1e-9 * a.max(1.0) {
        format!("{}", v.round() as i64)
    } else if a >= 1.0 {
        trim(v, 2)
    } else {
        let digits = (2.0 - a.log10().floor()).clamp(1.0, 12.0) as usize;
        trim(v, digits)
    }
}

/// Splits `root` into the plot (left) and a legend panel (right, `legend_px`
/// wide) so legends never cover data; draws the legend's `entries` (label,
/// colour) as filled boxes and text, top to bottom.
pub fn with_legend<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    legend_px: u32,
    title: &str,
    entries: &[(String, RGBColor)],
) -> Result<DrawingArea<DB, Shift>, DynErr>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(err)?;
    let (w, _) = root.dim_in_pixel();
    let (plot, legend) = root.split_horizontally(w.saturating_sub(legend_px));
    legend
        .draw(&Text::new(
            title.to_string(),
            (8, 50),
            ("sans-serif", 17).into_font(),
        ))
        .map_err(err)?;
    for (i, (label, c)) in entries.iter().enumerate() {
        let y = 80 + 26 * i as i32;
        legend
            .draw(&Rectangle::new([(8, y), (26, y + 16)], c.filled()))
            .map_err(err)?;
        legend
            .draw(&Text::new(
                label.clone(),
                (34, y + 1),
                ("sans-serif", 15).into_font(),
            ))
            .map_err(err)?;
    }
    Ok(plot)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_labels_read_as_the_values() {
        assert_eq!(compact(100.0), "100");
        assert_eq!(compact(1024.0), "1024");
        assert_eq!(compact(12500.0), "12.5k");
        assert_eq!(compact(3e6), "3M");
        assert_eq!(compact(0.25), "0.25");
        assert_eq!(compact(2.5), "2.5");
        assert_eq!(compact(0.0125), "0.0125");
    }

    #[test]
    fn a_planner_has_one_colour_whatever_else_is_drawn() {
        let a = entries(["gpu-a".to_string(), "fsdp".to_string()].iter());
        let b = entries(["fsdp".to_string()].iter());
        assert_eq!(a[1].1, b[0].1);
    }
}
