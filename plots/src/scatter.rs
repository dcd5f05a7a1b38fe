//! Predicted-vs-measured scatter figure on log-log axes, with the y = x line
//! and a +-band (e.g. 25%) around it, one colour per group (GPU or model).
//! Rendered as PNG and SVG. Values are in whatever unit the caller labels
//! (ms, GiB); non-positive values cannot sit on log axes and are skipped.
//!
//! Text is rendered with a system TrueType font (plotters' `ttf` feature,
//! found through fontconfig): a machine needs one installed, e.g. Debian's
//! `fonts-dejavu-core`. Without it rendering fails with a font error rather
//! than writing a figure without labels.

use plotters::coord::combinators::IntoLogRange;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::error::Error;
use std::path::Path;

/// One point of the scatter.
#[derive(Debug, Clone, PartialEq)]
pub struct ScatterPoint {
    /// Measured value (x).
    pub measured: f64,
    /// Predicted value (y).
    pub predicted: f64,
    /// Group (legend entry, colour).
    pub group: String,
}

/// Titles and the error band of a scatter figure.
#[derive(Debug, Clone, PartialEq)]
pub struct ScatterSpec {
    /// Caption.
    pub title: String,
    /// X axis label (with unit).
    pub x_label: String,
    /// Y axis label (with unit).
    pub y_label: String,
    /// Relative band drawn around y = x (0.25 = +-25%); 0 for none.
    pub band: f64,
}

/// Figure size in pixels.
pub const SIZE: (u32, u32) = (1000, 800);

type DynErr = Box<dyn Error + Send + Sync>;

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    points: &[ScatterPoint],
    spec: &ScatterSpec,
) -> Result<(), DynErr>
where
    DB::ErrorType: 'static,
{
    let pts: Vec<&ScatterPoint> = points
        .iter()
        .filter(|p| {
            p.measured > 0.0
                && p.predicted > 0.0
                && p.measured.is_finite()
                && p.predicted.is_finite()
        })
        .collect();
    let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
    for p in &pts {
        lo = lo.min(p.measured).min(p.predicted);
        hi = hi.max(p.measured).max(p.predicted);
    }
    if !lo.is_finite() || hi <= 0.0 {
        lo = 0.1;
        hi = 10.0;
    }
    let (lo, hi) = (lo / 1.5, hi * 1.5);
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption(&spec.title, ("sans-serif", 26))
        .margin(15)
        .x_label_area_size(55)
        .y_label_area_size(75)
        .build_cartesian_2d((lo..hi).log_scale(), (lo..hi).log_scale())
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_label_formatter(&|v| crate::render::compact(*v))
        .y_label_formatter(&|v| crate::render::compact(*v))
        .x_desc(&spec.x_label)
        .y_desc(&spec.y_label)
        .label_style(("sans-serif", 16))
        .axis_desc_style(("sans-serif", 20))
        .draw()
        .map_err(|e| e.to_string())?;
    // y = k x inside the plot box only: an end outside the axes' range is
    // dropped by the log backend, which cut the error bands short.
    let diag = |k: f64| {
        let (x0, x1) = (lo.max(lo / k), hi.min(hi / k));
        vec![(x0, x0 * k), (x1, x1 * k)]
    };
    chart
        .draw_series(LineSeries::new(diag(1.0), BLACK.stroke_width(2)))
        .map_err(|e| e.to_string())?
        .label("y = x")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.stroke_width(2)));
    if spec.band > 0.0 {
        let style = ShapeStyle::from(&BLACK.mix(0.4)).stroke_width(1);
        chart
            .draw_series(LineSeries::new(diag(1.0 + spec.band), style))
            .map_err(|e| e.to_string())?
            .label(format!("+-{:.0}%", spec.band * 100.0))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        chart
            .draw_series(LineSeries::new(diag(1.0 - spec.band), style))
            .map_err(|e| e.to_string())?;
    }
    let mut groups: Vec<&str> = pts.iter().map(|p| p.group.as_str()).collect();
    groups.sort();
    groups.dedup();
    for (i, g) in groups.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(
                pts.iter()
                    .filter(|p| p.group == *g)
                    .map(|p| Circle::new((p.measured, p.predicted), 3, color.filled())),
            )
            .map_err(|e| e.to_string())?
            .label(*g)
            .legend(move |(x, y)| Circle::new((x + 10, y), 4, color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}

/// The scatter as a [`crate::Figure`].
struct Scatter<'a> {
    points: &'a [ScatterPoint],
    spec: &'a ScatterSpec,
}

impl crate::Figure for Scatter<'_> {
    fn size(&self) -> (u32, u32) {
        SIZE
    }
    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> Result<(), DynErr>
    where
        DB::ErrorType: 'static,
    {
        draw(root, self.points, self.spec)
    }
}

/// Renders the scatter as `<base>.png` and `<base>.svg` (in memory; the
/// caller writes them).
pub fn render(
    points: &[ScatterPoint],
    spec: &ScatterSpec,
    base: &Path,
) -> Result<Vec<crate::render::Rendered>, DynErr> {
    crate::render::render_to(
        &Scatter { points, spec },
        base.with_extension("png"),
        base.with_extension("svg"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_png_and_svg_with_text() {
        let dir = std::env::temp_dir().join(format!("cephalo-plots-test-{}", std::process::id()));
        let pts: Vec<ScatterPoint> = (1..40)
            .map(|i| ScatterPoint {
                measured: i as f64,
                predicted: i as f64 * (1.0 + 0.01 * (i % 7) as f64),
                group: if i % 2 == 0 {
                    "a100".into()
                } else {
                    "t4".into()
                },
            })
            .collect();
        let spec = ScatterSpec {
            title: "Scatter test title".into(),
            x_label: "measured ms".into(),
            y_label: "predicted ms".into(),
            band: 0.25,
        };
        let files = render(&pts, &spec, &dir.join("fig"))
            .expect("render (is a TrueType font installed? fonts-dejavu-core)");
        assert_eq!(files.len(), 2);
        assert_eq!(files[0].path, dir.join("fig.png"));
        assert_eq!(files[1].path, dir.join("fig.svg"));
        let svg = String::from_utf8(files[1].bytes.clone()).unwrap();
        assert!(svg.contains("Scatter test title"), "svg lacks the title");
        assert!(svg.contains("measured ms") && svg.contains("t4"));
        let img = &files[0].bytes;
        assert!(img.len() > 10_000, "png too small");
        assert_eq!(&img[1..4], b"PNG", "not a PNG");
        // Rasterised text: the caption band (top 40 rows) must hold dark pixels.
        let (w, h) = SIZE;
        let mut buf = vec![0u8; (w * h * 3) as usize];
        draw(
            BitMapBackend::with_buffer(&mut buf, SIZE).into_drawing_area(),
            &pts,
            &spec,
        )
        .unwrap();
        let dark = buf[..(w * 40 * 3) as usize]
            .chunks(3)
            .filter(|p| p.iter().all(|c| *c < 100))
            .count();
        assert!(dark > 50, "no caption text rasterised ({dark} dark pixels)");
    }
}
