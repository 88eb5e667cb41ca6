//! Parsing raw HTTP/1.1 responses, for the cases sent over raw TCP.

use bytes::Bytes;

use crate::verdict::Answer;

/// Every response in `bytes`, which must hold whole responses and nothing else.
pub(crate) fn parse_responses(mut bytes: &[u8], head_request: bool) -> Result<Vec<Answer>, String> {
    let mut answers = Vec::new();
    while !bytes.is_empty() {
        let (answer, rest) = parse_response(bytes, head_request)?;
        answers.push(answer);
        bytes = rest;
    }
    Ok(answers)
}

fn parse_response(bytes: &[u8], head_request: bool) -> Result<(Answer, &[u8]), String> {
    let end = find(bytes, b"\r\n\r\n").ok_or("no end of the response head")?;
    let head = std::str::from_utf8(&bytes[..end]).map_err(|_| "a head that is not text")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = parse_status_line(status_line)?;
    let mut content_type = None;
    let mut length = None;
    let mut chunked = false;
    for line in lines {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| format!("header line without a colon: {line:?}"))?;
        if name.is_empty() || !name.bytes().all(is_tchar) {
            return Err(format!("bad header name {name:?}"));
        }
        let value = value.trim();
        match name.to_ascii_lowercase().as_str() {
            "content-type" => content_type = Some(value.to_owned()),
            "content-length" => {
                length = Some(
                    value
                        .parse::<usize>()
                        .map_err(|_| format!("bad content-length {value:?}"))?,
                );
            }
            "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
            _ => {}
        }
    }
    let rest = &bytes[end + 4..];
    let bodiless = head_request || status < 200 || status == 204 || status == 304;
    let (body, rest) = if bodiless {
        (Vec::new(), rest)
    } else if chunked {
        dechunk(rest)?
    } else if let Some(length) = length {
        if rest.len() < length {
            return Err(format!("body of {} bytes, {length} announced", rest.len()));
        }
        (rest[..length].to_vec(), &rest[length..])
    } else {
        (rest.to_vec(), &rest[rest.len()..])
    };
    let answer = Answer {
        status,
        content_type,
        body: Bytes::from(body),
    };
    Ok((answer, rest))
}

fn parse_status_line(line: &str) -> Result<u16, String> {
    let rest = line
        .strip_prefix("HTTP/1.1 ")
        .or_else(|| line.strip_prefix("HTTP/1.0 "))
        .ok_or_else(|| format!("bad status line {line:?}"))?;
    let code = rest.get(..3).ok_or("short status line")?;
    let valid = code.bytes().all(|b| b.is_ascii_digit())
        && matches!(rest.as_bytes().get(3), None | Some(b' '));
    if !valid {
        return Err(format!("bad status line {line:?}"));
    }
    code.parse().map_err(|_| format!("bad status {code:?}"))
}

fn dechunk(mut bytes: &[u8]) -> Result<(Vec<u8>, &[u8]), String> {
    let mut body = Vec::new();
    loop {
        let line_end = find(bytes, b"\r\n").ok_or("chunk size line not ended")?;
        let size_text =
            std::str::from_utf8(&bytes[..line_end]).map_err(|_| "chunk size not text")?;
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| format!("bad chunk size {size_text:?}"))?;
        bytes = &bytes[line_end + 2..];
        if size == 0 {
            // No trailers from the gateway: the empty line ends the body.
            let after = bytes
                .strip_prefix(b"\r\n")
                .ok_or("chunked body not ended")?;
            return Ok((body, after));
        }
        if bytes.len() < size + 2 || &bytes[size..size + 2] != b"\r\n" {
            return Err("chunk shorter than its size".into());
        }
        body.extend_from_slice(&bytes[..size]);
        bytes = &bytes[size + 2..];
    }
}

pub(crate) fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}
