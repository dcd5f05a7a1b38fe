//! Writing one drawing to `<base>.png` and `<base>.svg` (every figure
//! module draws through this), and the colours figures share.

use plotters::coord::Shift;
use plotters::prelude::*;
use std::error::Error;
use std::path::{Path, PathBuf};

/// Error of a figure (plotters' backends' errors, I/O).
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

/// Renders `fig` to `<base>.png` and `<base>.svg`; returns both paths.
pub fn render<F: Figure>(fig: &F, base: &Path) -> Result<Vec<PathBuf>, DynErr> {
    if let Some(dir) = base.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    // Appended, not `with_extension`: names such as `time-gpt2.7b` keep their dot.
    let png = PathBuf::from(format!("{}.png", base.display()));
    let svg = PathBuf::from(format!("{}.svg", base.display()));
    fig.draw(BitMapBackend::new(&png, fig.size()).into_drawing_area())?;
    fig.draw(SVGBackend::new(&svg, fig.size()).into_drawing_area())?;
    Ok(vec![png, svg])
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

/// Legend entries for `names`, coloured in order.
pub fn entries<'a>(names: impl Iterator<Item = &'a String>) -> Vec<(String, RGBColor)> {
    names
        .enumerate()
        .map(|(i, n)| (n.clone(), color(i)))
        .collect()
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
