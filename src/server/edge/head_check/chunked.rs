//! Where a chunked request body ends. A mirror of hyper's own decoder
//! (`proto/h1/decode.rs`, `ChunkedState`), step for step: if the two read a body
//! differently, the next head would be looked for in the wrong place.

/// Where the decoder is in a chunked body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Start,
    Size,
    SizeLws,
    Extension,
    SizeLf,
    Body,
    BodyCr,
    BodyLf,
    Trailer,
    TrailerLf,
    EndCr,
    EndLf,
    End,
}

/// What a call to [`Chunked::advance`] found.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Advanced {
    /// Every byte belongs to the body, which goes on.
    More,
    /// The body ends after this many bytes.
    Done(usize),
    /// Bytes hyper refuses as a chunked body: it fails the request and closes.
    Invalid,
}

#[derive(Debug)]
pub(super) struct Chunked {
    step: Step,
    /// The size of the chunk being read, then what is left of it.
    size: u64,
}

impl Chunked {
    pub(super) fn new() -> Self {
        Self {
            step: Step::Start,
            size: 0,
        }
    }

    /// Reads `bytes`, the next ones of the body.
    pub(super) fn advance(&mut self, bytes: &[u8]) -> Advanced {
        let mut at = 0;
        while at < bytes.len() {
            if self.step == Step::Body {
                // The chunk's data: skipped, never looked at.
                let take = usize::try_from(self.size)
                    .unwrap_or(usize::MAX)
                    .min(bytes.len() - at);
                at += take;
                self.size -= take as u64;
                if self.size == 0 {
                    self.step = Step::BodyCr;
                }
                continue;
            }
            let Some(step) = self.next(bytes[at]) else {
                return Advanced::Invalid;
            };
            at += 1;
            if step == Step::End {
                return Advanced::Done(at);
            }
            self.step = step;
        }
        Advanced::More
    }

    /// The step after `byte`; `None` where hyper fails the body.
    fn next(&mut self, byte: u8) -> Option<Step> {
        use Step::*;
        Some(match (self.step, byte) {
            (Start | Size, b) if hex(b).is_some() => {
                self.size = self.size.checked_mul(16)?.checked_add(u64::from(hex(b)?))?;
                Size
            }
            (Size | SizeLws, b'\t' | b' ') => SizeLws,
            (Size | SizeLws, b';') => Extension,
            (Size | SizeLws | Extension, b'\r') => SizeLf,
            (Extension, b'\n') => return None,
            (Extension, _) => Extension,
            (SizeLf, b'\n') if self.size == 0 => EndCr,
            (SizeLf, b'\n') => Body,
            (BodyCr, b'\r') => BodyLf,
            (BodyLf, b'\n') => Start,
            (EndCr, b'\r') => EndLf,
            (Trailer, b'\r') => TrailerLf,
            (EndCr | Trailer, _) => Trailer,
            (TrailerLf, b'\n') => EndCr,
            (EndLf, b'\n') => End,
            _ => return None,
        })
    }
}

fn hex(byte: u8) -> Option<u8> {
    (byte as char).to_digit(16).map(|digit| digit as u8)
}
