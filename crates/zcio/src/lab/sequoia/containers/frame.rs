//! The frames of paper 003's frame experiment: their geometry, as given on the command line
//! and kept in `results.json`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
