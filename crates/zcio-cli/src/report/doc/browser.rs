//! The browser check: open a rendered page in headless Chromium and report images that did not
//! render and errors the page raised.

use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// What headless Chromium saw when it loaded a page: see [`browser_check`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct BrowserCheck {
    /// `<img>` elements on the page.
    pub images: usize,
    /// Inline `<svg>` elements on the page.
    #[serde(default)]
    pub inline_svgs: usize,
    /// Images that did not render (their `alt` text, else the start of their `src`), and inline
    /// SVGs of zero size.
    pub broken: Vec<String>,
    /// Script errors, unhandled promise rejections, `console.error` calls and loads the page's
    /// security policy blocked.
    pub errors: Vec<String>,
}

impl BrowserCheck {
    /// No broken image and no error.
    pub fn is_ok(&self) -> bool {
        self.broken.is_empty() && self.errors.is_empty()
    }
}

/// Why [`browser_check`] could not check a page.
#[derive(Debug)]
pub enum BrowserCheckError {
    /// No Chromium binary: neither `$ZCIO_CHROMIUM` nor any of the usual names on `PATH`.
    NoBrowser {
        /// The names and paths looked for.
        tried: Vec<String>,
    },
    /// Reading the page, writing its copy or starting the browser failed.
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: io::Error,
    },
    /// The browser ran past the time limit and was killed.
    TimedOut {
        /// The browser binary.
        browser: PathBuf,
        /// The limit.
        limit: Duration,
    },
    /// The browser exited with a failure status and printed no result.
    Failed {
        /// The browser binary.
        browser: PathBuf,
        /// Its exit status.
        status: ExitStatus,
        /// The last lines of its standard error.
        stderr_tail: String,
    },
    /// The browser exited but the dumped page holds no result element (or an unreadable one).
    NoResult {
        /// The browser binary.
        browser: PathBuf,
        /// What was wrong.
        detail: String,
        /// The last lines of its standard error.
        stderr_tail: String,
    },
}

impl fmt::Display for BrowserCheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoBrowser { tried } => write!(
                f,
                "no Chromium found (looked for {}); install chromium or set ZCIO_CHROMIUM",
                tried.join(", ")
            ),
            Self::Io { what, source } => write!(f, "{what}: {source}"),
            Self::TimedOut { browser, limit } => write!(
                f,
                "{} did not finish within {} s and was killed",
                browser.display(),
                limit.as_secs()
            ),
            Self::Failed {
                browser,
                status,
                stderr_tail,
            } => write!(
                f,
                "{} failed ({status}); end of its stderr:\n{stderr_tail}",
                browser.display()
            ),
            Self::NoResult {
                browser,
                detail,
                stderr_tail,
            } => write!(
                f,
                "{} left no check result in the page ({detail}); end of its stderr:\n{stderr_tail}",
                browser.display()
            ),
        }
    }
}

impl std::error::Error for BrowserCheckError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Browser binaries looked for on `PATH`, after `$ZCIO_CHROMIUM`.
const BROWSERS: [&str; 4] = [
    "chromium",
    "chromium-headless-shell",
    "chromium-browser",
    "google-chrome",
];

/// How long one browser run may take before it is killed.
const BROWSER_LIMIT: Duration = Duration::from_secs(60);

/// The element id the checker writes its result into.
const RESULT_ID: &str = "zcio-check";

/// Injected as the first element of `<head>`: collects errors from the start, and after `load`
/// walks the images and inline SVGs, then writes the result as JSON into `<pre id="zcio-check">`.
const CHECKER: &str = r#"<script>(function(){
var E=[];
window.onerror=function(m,s,l,c,e){E.push(String(m)+' ('+(s||'page')+':'+(l||0)+')');return false;};
window.addEventListener('unhandledrejection',function(e){E.push('unhandled rejection: '+String(e.reason));});
document.addEventListener('securitypolicyviolation',function(e){E.push('blocked by the page policy ('+e.violatedDirective+'): '+e.blockedURI);},true);
var ce=console.error;console.error=function(){E.push('console.error: '+Array.prototype.map.call(arguments,String).join(' '));return ce.apply(console,arguments);};
function report(){
var B=[],im=document.images,sv=document.querySelectorAll('svg'),i;
for(i=0;i<im.length;i++){var g=im[i];if(!(g.complete&&g.naturalWidth>0))B.push(g.alt||('img '+g.src.slice(0,60)));}
for(i=0;i<sv.length;i++){var r=sv[i].getBoundingClientRect();if(!(r.width>0&&r.height>0))B.push('inline svg #'+i);}
var p=document.createElement('pre');p.id='zcio-check';
p.textContent=JSON.stringify({images:im.length,inline_svgs:sv.length,broken:B,errors:E});
document.body.appendChild(p);}
window.addEventListener('load',function(){setTimeout(report,50);});
})();</script>"#;

/// Open `index_html` in headless Chromium and report what rendered.
///
/// The page is copied into a temporary directory with a checker script injected as the first
/// element of `<head>` (so a page that loads anything beside itself shows broken images there).
/// The checker collects script errors, unhandled rejections, `console.error` calls and blocked
/// loads, and on `load` counts the images that did not render. With `screenshot`, the original
/// page is also captured at 1280 × 4000 into that PNG file.
///
/// The browser is `$ZCIO_CHROMIUM`, else the first of `chromium`, `chromium-headless-shell`,
/// `chromium-browser` and `google-chrome` on `PATH`; [`BrowserCheckError::NoBrowser`] when there
/// is none, so that callers can skip. Each browser run is killed after 60 s.
pub fn browser_check(
    index_html: &Path,
    screenshot: Option<&Path>,
) -> Result<BrowserCheck, BrowserCheckError> {
    let browser = find_browser()?;
    let io_err = |what: String| move |source| BrowserCheckError::Io { what, source };
    let page = std::fs::read_to_string(index_html)
        .map_err(io_err(format!("reading {}", index_html.display())))?;
    let tmp = tempfile::Builder::new()
        .prefix("zcio-browser-check")
        .tempdir()
        .map_err(io_err("creating a temporary directory".to_owned()))?;
    let copy = tmp.path().join("index.html");
    std::fs::write(&copy, inject_checker(&page))
        .map_err(io_err(format!("writing {}", copy.display())))?;

    let mut args = common_args(tmp.path(), "dump");
    args.push("--dump-dom".into());
    args.push(file_url(&copy).into());
    let run = run_browser(&browser, &args, tmp.path(), "dump")?;
    let result = parse_result(&run.stdout);

    if let Some(png) = screenshot {
        let original = std::path::absolute(index_html)
            .map_err(io_err(format!("resolving {}", index_html.display())))?;
        let target =
            std::path::absolute(png).map_err(io_err(format!("resolving {}", png.display())))?;
        let mut args = common_args(tmp.path(), "shot");
        args.push(format!("--screenshot={}", target.display()).into());
        args.push("--window-size=1280,4000".into());
        args.push(file_url(&original).into());
        let shot = run_browser(&browser, &args, tmp.path(), "shot")?;
        if !shot.status.success() || !target.is_file() {
            return Err(BrowserCheckError::Failed {
                browser,
                status: shot.status,
                stderr_tail: tail(&shot.stderr),
            });
        }
    }

    match result {
        Ok(check) => Ok(check),
        Err(_) if !run.status.success() => Err(BrowserCheckError::Failed {
            browser,
            status: run.status,
            stderr_tail: tail(&run.stderr),
        }),
        Err(detail) => Err(BrowserCheckError::NoResult {
            browser,
            detail,
            stderr_tail: tail(&run.stderr),
        }),
    }
}

fn find_browser() -> Result<PathBuf, BrowserCheckError> {
    let mut tried = Vec::new();
    let mut names: Vec<String> = Vec::new();
    if let Some(env) = std::env::var_os("ZCIO_CHROMIUM").filter(|v| !v.is_empty()) {
        let env = PathBuf::from(env);
        if env.components().count() > 1 {
            if is_executable(&env) {
                return Ok(env);
            }
            tried.push(format!("ZCIO_CHROMIUM={}", env.display()));
        } else {
            names.push(env.to_string_lossy().into_owned());
        }
    }
    names.extend(BROWSERS.iter().map(|s| (*s).to_owned()));
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in names {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(&name);
            if is_executable(&candidate) {
                return Ok(candidate);
            }
        }
        tried.push(name);
    }
    Err(BrowserCheckError::NoBrowser { tried })
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The page with [`CHECKER`] as the first element of `<head>` (a `<head>` is made if missing),
/// behind a byte-order mark so that the moved `<meta charset>` cannot change the decoding.
fn inject_checker(page: &str) -> String {
    let lower = page.to_ascii_lowercase();
    let head = lower.match_indices("<head").map(|(i, _)| i).find(|&i| {
        matches!(
            lower.as_bytes().get(i + 5),
            Some(b'>' | b' ' | b'\t' | b'\n' | b'\r')
        )
    });
    let mut out = String::from("\u{feff}");
    match head.and_then(|i| lower[i..].find('>').map(|j| i + j + 1)) {
        Some(at) => {
            out.push_str(&page[..at]);
            out.push_str(CHECKER);
            out.push_str(&page[at..]);
        }
        None => {
            // After the doctype (if any), so that the page keeps its rendering mode.
            let at = if lower.trim_start().starts_with("<!doctype") {
                lower.find('>').map_or(0, |j| j + 1)
            } else {
                0
            };
            out.push_str(&page[..at]);
            out.push_str("<head>");
            out.push_str(CHECKER);
            out.push_str("</head>");
            out.push_str(&page[at..]);
        }
    }
    out
}

fn common_args(tmp: &Path, profile: &str) -> Vec<OsString> {
    let mut profile_arg = OsString::from("--user-data-dir=");
    profile_arg.push(tmp.join(format!("profile-{profile}")));
    [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-extensions",
        "--no-first-run",
        "--no-default-browser-check",
        "--hide-scrollbars",
        "--mute-audio",
        "--virtual-time-budget=10000",
    ]
    .into_iter()
    .map(OsString::from)
    .chain([profile_arg])
    .collect()
}

/// A `file://` URL for an absolute path, percent-encoding what URLs do not allow.
fn file_url(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt as _;
    let mut url = String::from("file://");
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-_.~".contains(&b) {
            url.push(char::from(b));
        } else {
            url.push_str(&format!("%{b:02X}"));
        }
    }
    url
}

struct Run {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// Run the browser with its output in files (its helper processes may keep pipes open), in its
/// own process group, killed as a group after [`BROWSER_LIMIT`].
fn run_browser(
    browser: &Path,
    args: &[OsString],
    tmp: &Path,
    name: &str,
) -> Result<Run, BrowserCheckError> {
    use std::os::unix::process::CommandExt as _;
    let io_err = |what: String| move |source| BrowserCheckError::Io { what, source };
    let out_path = tmp.join(format!("{name}.stdout"));
    let err_path = tmp.join(format!("{name}.stderr"));
    let out = std::fs::File::create(&out_path)
        .map_err(io_err(format!("creating {}", out_path.display())))?;
    let err = std::fs::File::create(&err_path)
        .map_err(io_err(format!("creating {}", err_path.display())))?;
    let mut child = Command::new(browser)
        .args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()
        .map_err(io_err(format!("starting {}", browser.display())))?;
    let deadline = Instant::now() + BROWSER_LIMIT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Ok(None) => {
                // The child is not reaped yet, so its pid still names its process group.
                let _ = rustix::process::kill_process_group(
                    rustix::process::Pid::from_child(&child),
                    rustix::process::Signal::KILL,
                );
                let _ = child.kill();
                let _ = child.wait();
                return Err(BrowserCheckError::TimedOut {
                    browser: browser.to_owned(),
                    limit: BROWSER_LIMIT,
                });
            }
            Err(source) => {
                return Err(BrowserCheckError::Io {
                    what: format!("waiting for {}", browser.display()),
                    source,
                });
            }
        }
    };
    let read = |p: &Path| {
        std::fs::read(p)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .map_err(io_err(format!("reading {}", p.display())))
    };
    Ok(Run {
        status,
        stdout: read(&out_path)?,
        stderr: read(&err_path)?,
    })
}

/// The checker's JSON from the dumped DOM.
fn parse_result(dom: &str) -> Result<BrowserCheck, String> {
    let open = format!("<pre id=\"{RESULT_ID}\">");
    let start = dom
        .find(&open)
        .ok_or_else(|| format!("no <pre id=\"{RESULT_ID}\"> in {} bytes of DOM", dom.len()))?
        + open.len();
    let len = dom[start..]
        .find("</pre>")
        .ok_or_else(|| format!("<pre id=\"{RESULT_ID}\"> is not closed"))?;
    let json = unescape(&dom[start..start + len]);
    serde_json::from_str(&json).map_err(|e| format!("unreadable result {json:?}: {e}"))
}

/// Undo the escaping of serialised HTML text.
fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&")
}

/// The last 20 lines of `text`.
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checker_goes_first_in_head() {
        let page =
            "<!DOCTYPE html><html><HEAD lang=x><meta charset=\"utf-8\"></head><body></body></html>";
        let out = inject_checker(page);
        let at = out.find("<script>").unwrap();
        assert_eq!(&out[..at], "\u{feff}<!DOCTYPE html><html><HEAD lang=x>");
        let out = inject_checker("<!doctype html><p>x</p>");
        assert!(
            out.starts_with("\u{feff}<!doctype html><head><script>"),
            "{out}"
        );
        // `<header>` is not `<head>`.
        let out = inject_checker("<header></header>");
        assert!(out.starts_with("\u{feff}<head><script>"), "{out}");
    }

    #[test]
    fn result_is_read_from_the_dom() {
        let dom = "<html><body><p>x</p><pre id=\"zcio-check\">{\"images\":2,\"inline_svgs\":0,\
                   \"broken\":[\"a &amp; b\"],\"errors\":[\"x &lt; y\"]}</pre></body></html>";
        let r = parse_result(dom).unwrap();
        assert_eq!(r.images, 2);
        assert_eq!(r.broken, ["a & b"]);
        assert_eq!(r.errors, ["x < y"]);
        assert!(!r.is_ok());
        assert!(
            parse_result("<html></html>")
                .unwrap_err()
                .contains("no <pre")
        );
    }

    #[test]
    fn file_urls_are_encoded() {
        assert_eq!(
            file_url(Path::new("/tmp/a b/é.html")),
            "file:///tmp/a%20b/%C3%A9.html"
        );
    }
}
