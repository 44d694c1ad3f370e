//! PNG digits for `kiln predict`: any size, grayscale/RGB(A)/palette, to a 28x28 MNIST-like image.

use crate::core::{Error, Result};
use std::path::Path;

/// Decodes a PNG into 8-bit grayscale pixels `(pixels, width, height)`. Colour is reduced with
/// the Rec. 601 luma weights; transparent pixels are composited over white (a stroke drawn on a
/// transparent canvas reads as ink on paper).
pub fn read_png_gray(path: &Path) -> Result<(Vec<u8>, usize, usize)> {
    let err = |what: String| Error::format("predict", format!("{}: {what}", path.display()));
    let file = std::fs::File::open(path)
        .map_err(|e| Error::io("predict", format!("cannot open {}: {e}", path.display())))?;
    let mut decoder = png::Decoder::new(std::io::BufReader::new(file));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder
        .read_info()
        .map_err(|e| err(format!("expected a PNG image: {e}")))?;
    let size = reader
        .output_buffer_size()
        .ok_or_else(|| err("image too large".into()))?;
    let mut buf = vec![0u8; size];
    let info = reader
        .next_frame(&mut buf)
        .map_err(|e| err(format!("corrupt PNG data: {e}")))?;
    let (w, h) = (info.width as usize, info.height as usize);
    let channels = info.color_type.samples();
    let pixels = buf[..info.buffer_size()]
        .chunks_exact(channels)
        .map(|p| {
            let (luma, alpha) = match *p {
                [g] => (g as f32, 255.0),
                [g, a] => (g as f32, a as f32),
                [r, g, b] => (luma(r, g, b), 255.0),
                [r, g, b, a] => (luma(r, g, b), a as f32),
                _ => (0.0, 255.0),
            };
            let a = alpha / 255.0;
            (luma * a + 255.0 * (1.0 - a)).round() as u8
        })
        .collect();
    Ok((pixels, w, h))
}

fn luma(r: u8, g: u8, b: u8) -> f32 {
    0.299 * r as f32 + 0.587 * g as f32 + 0.114 * b as f32
}

/// Resizes a grayscale image to `out_w x out_h` by area averaging (each output pixel is the mean of
/// the input area it covers), which anti-aliases when shrinking.
pub fn resize_area(pixels: &[u8], w: usize, h: usize, out_w: usize, out_h: usize) -> Vec<f32> {
    let (sx, sy) = (w as f64 / out_w as f64, h as f64 / out_h as f64);
    let mut out = Vec::with_capacity(out_w * out_h);
    for oy in 0..out_h {
        let (y0, y1) = (oy as f64 * sy, (oy + 1) as f64 * sy);
        for ox in 0..out_w {
            let (x0, x1) = (ox as f64 * sx, (ox + 1) as f64 * sx);
            let (mut sum, mut area) = (0.0, 0.0);
            for y in (y0.floor() as usize)..(y1.ceil() as usize).min(h) {
                let wy = (y1.min(y as f64 + 1.0) - y0.max(y as f64)).max(0.0);
                for x in (x0.floor() as usize)..(x1.ceil() as usize).min(w) {
                    let wx = (x1.min(x as f64 + 1.0) - x0.max(x as f64)).max(0.0);
                    sum += wx * wy * pixels[y * w + x] as f64;
                    area += wx * wy;
                }
            }
            out.push(if area > 0.0 { (sum / area) as f32 } else { 0.0 });
        }
    }
    out
}

/// A PNG file as a 28x28 MNIST image: grayscale, resized, and inverted when its border is light
/// (MNIST digits are light ink on a dark background). Values are in `[0, 255]`.
pub fn mnist_input_from_png(path: &Path) -> Result<Vec<f32>> {
    let (pixels, w, h) = read_png_gray(path)?;
    if w == 0 || h == 0 {
        return Err(Error::format(
            "predict",
            format!(
                "{}: expected a non-empty image, found {w}x{h}",
                path.display()
            ),
        ));
    }
    let img = resize_area(&pixels, w, h, 28, 28);
    let border: Vec<f32> = (0..28)
        .flat_map(|i| [img[i], img[27 * 28 + i], img[i * 28], img[i * 28 + 27]])
        .collect();
    let light = border.iter().sum::<f32>() / border.len() as f32 > 127.5;
    Ok(if light {
        img.into_iter().map(|v| 255.0 - v).collect()
    } else {
        img
    })
}
