//! The frames of paper 003's frame experiment: their geometry, as given on the command line
//! and kept in `results.json`, and their contents, drawn by the sender and checked at every
//! stage.

use crate::transfer::Res;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};

/// A frame's geometry: `width` × `height` pixels of `depth` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Frame {
    /// Pixels a line.
    pub width: usize,
    /// Lines.
    pub height: usize,
    /// Bytes a pixel.
    pub depth: usize,
}

impl Frame {
    /// The paper's: 640 × 480, one byte a pixel (300 KiB).
    pub const PAPER: Frame = Frame {
        width: 640,
        height: 480,
        depth: 1,
    };
    /// Today's displays': 1920 × 1080, four bytes a pixel (7.9 MiB).
    pub const HD: Frame = Frame {
        width: 1920,
        height: 1080,
        depth: 4,
    };

    /// Its bytes.
    pub fn bytes(self) -> usize {
        self.width * self.height * self.depth
    }

    /// `640×480×1`.
    pub fn name(self) -> String {
        format!("{}×{}×{}", self.width, self.height, self.depth)
    }

    /// Frames of this size a run sends: `paper_frames` scaled to move as many bytes as that
    /// many of the paper's frames, at least 20.
    pub fn frames_for(self, paper_frames: u64) -> u64 {
        (paper_frames * Frame::PAPER.bytes() as u64 / self.bytes() as u64).max(20)
    }
}

impl std::str::FromStr for Frame {
    type Err = String;

    /// `WxHxD` (or with `×`): at least 16 bytes, at most 64 MiB, a whole number of 8-byte
    /// words.
    fn from_str(t: &str) -> Result<Frame, String> {
        let bad = || format!("a frame is WIDTHxHEIGHTxBYTES_A_PIXEL (as 640x480x1), not {t:?}");
        let n: Vec<usize> = t
            .split(['x', '×'])
            .map(|x| x.trim().parse().map_err(|_| bad()))
            .collect::<Result<_, _>>()?;
        let [width, height, depth] = n[..] else {
            return Err(bad());
        };
        let f = Frame {
            width,
            height,
            depth,
        };
        let bytes = width.checked_mul(height).and_then(|x| x.checked_mul(depth));
        match bytes {
            Some(b) if (16..=64 << 20).contains(&b) && b % 8 == 0 => Ok(f),
            _ => Err(format!(
                "a frame of {t}: its bytes must be a multiple of 8 from 16 to 64 MiB"
            )),
        }
    }
}

/// The paper's frame (what rows written before frames had sizes were measured with).
pub(super) fn paper_frame() -> Frame {
    Frame::PAPER
}

/// The pattern of frame `n` after its number: byte `8 + i` is `i + n` (mod 256). It repeats
/// every 256 bytes, so it is kept as one period of bytes and one of words.
struct Pattern {
    bytes: [u8; 256],
    words: [u64; 32],
}

impl Pattern {
    fn of(n: u64) -> Pattern {
        let salt = n as u8;
        let bytes: [u8; 256] = std::array::from_fn(|i| (i as u8).wrapping_add(salt));
        // Word w (from 1) holds bytes 8w..8w+8 of the frame, pattern bytes 8(w-1)..: its
        // phase is w mod 32.
        let words = std::array::from_fn(|t| {
            let b: [u8; 8] =
                std::array::from_fn(|j| ((8 * t + j) as u8).wrapping_sub(8).wrapping_add(salt));
            u64::from_le_bytes(b)
        });
        Pattern { bytes, words }
    }
}

/// Draw frame `n` into bytes: its number in the first 8, then the pattern.
pub(super) fn draw(n: u64, frame: &mut [u8]) {
    frame[..8].copy_from_slice(&n.to_le_bytes());
    let p = Pattern::of(n);
    let body = &mut frame[8..];
    let first = body.len().min(256);
    body[..first].copy_from_slice(&p.bytes[..first]);
    // Doubling copies of whole periods: memcpy's speed.
    let mut done = first;
    while done < body.len() {
        let k = done.min(body.len() - done);
        body.copy_within(..k, done);
        done += k;
    }
}

/// Draw frame `n` into a volatile container's words, as `draw` does into bytes: one period
/// of 32 words from word 0 (whose phase is 0), doubled by copies at `memcpy`'s speed, then
/// the number over word 0.
pub(super) fn draw_words(n: u64, words: &[AtomicU64], frame: usize) {
    let p = Pattern::of(n);
    let words = &words[..frame / 8];
    zcio_vm::words::store(words, &p.words);
    let mut done = p.words.len();
    while done < words.len() {
        let k = done.min(words.len() - done);
        zcio_vm::words::copy_within(words, 0..k, done);
        done += k;
    }
    words[0].store(n, Ordering::Relaxed);
}

fn check_number(n: u64, got: u64) -> Res<()> {
    if got != n {
        return Err(format!("frame {n} arrived as frame {got}").into());
    }
    Ok(())
}

pub(super) fn check(n: u64, frame: &[u8], whole: bool) -> Res<()> {
    check_number(
        n,
        u64::from_le_bytes(frame[..8].try_into().expect("8 bytes")),
    )?;
    if whole {
        let p = Pattern::of(n);
        for (k, c) in frame[8..].chunks(256).enumerate() {
            if let Some(i) = c.iter().zip(&p.bytes).position(|(a, b)| a != b) {
                return Err(format!("frame {n}: byte {} differs", 8 + 256 * k + i).into());
            }
        }
    }
    Ok(())
}

pub(super) fn check_words(n: u64, words: &[AtomicU64], whole: Option<usize>) -> Res<()> {
    check_number(n, words[0].load(Ordering::Relaxed))?;
    if let Some(frame) = whole {
        let p = Pattern::of(n);
        for (w, word) in words[1..frame / 8].iter().enumerate() {
            if word.load(Ordering::Relaxed) != p.words[(w + 1) % 32] {
                return Err(format!("frame {n}: word {} differs", w + 1).into());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Frame;

    #[test]
    fn frames_parse_with_x_or_times_and_runs_move_the_papers_bytes() {
        assert_eq!("640x480x1".parse::<Frame>(), Ok(Frame::PAPER));
        assert_eq!("1920×1080×4".parse::<Frame>(), Ok(Frame::HD));
        assert_eq!(Frame::HD.name(), "1920×1080×4");
        // 3000 of the paper's frames are 921.6 MB: 111 whole HD frames.
        assert_eq!(Frame::HD.frames_for(3000), 111);
        assert_eq!(Frame::HD.frames_for(2), 20);
        for bad in [
            "640x480",
            "1x1x1",
            "8193x8193x1",
            "axbxc",
            "2x2x2x2",
            "3x1x4",
        ] {
            let err = bad.parse::<Frame>().unwrap_err();
            assert!(err.contains(bad), "{bad}: {err}");
        }
    }
}
