//! `txcast reproduce` at its tiny (smoke) scale: every table and figure of the five papers
//! has its card in `index.html`; every measured one has a PNG that is a picture, not a blank
//! canvas; and headless Chromium loads every figure's image (and takes a screenshot of the
//! page). Without Chromium the browser part says it is skipped.

use std::path::{Path, PathBuf};
use std::process::Command;

fn txcast() -> Command {
    Command::new(env!("CARGO_BIN_EXE_txcast"))
}

/// The figure ids `txcast reproduce --list` names, and whether each is measured.
fn figures() -> Vec<(String, bool)> {
    let out = txcast()
        .args(["reproduce", "--list"])
        .output()
        .expect("run txcast");
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .filter_map(|l| {
            let id = l.split_whitespace().next()?.to_string();
            Some((id, !l.ends_with("(card: not measured yet)")))
        })
        .collect()
}

/// Width, height, and the share of pixels that differ from the most common colour.
fn png_ink(path: &Path) -> (u32, u32, f64, usize) {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut reader = png::Decoder::new(file).read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("a frame");
    let channels = match info.color_type {
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        other => panic!("{}: unexpected colour type {other:?}", path.display()),
    };
    let mut counts = std::collections::HashMap::new();
    for px in buf[..info.buffer_size()].chunks(channels) {
        *counts.entry(&px[..3]).or_insert(0usize) += 1;
    }
    let total: usize = counts.values().sum();
    let background = counts.values().copied().max().unwrap_or(0);
    (
        info.width,
        info.height,
        (total - background) as f64 / total.max(1) as f64,
        counts.len(),
    )
}

fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|c| {
            Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
}

fn chromium_cmd(browser: &str, profile: &Path) -> Command {
    let mut c = Command::new(browser);
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--hide-scrollbars",
        "--allow-file-access-from-files",
    ])
    .arg(format!("--user-data-dir={}", profile.display()));
    c
}

#[test]
fn help_and_bad_values() {
    let out = txcast()
        .args(["reproduce", "--help"])
        .output()
        .expect("run txcast");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && help.contains("Usage: txcast reproduce"),
        "{help}"
    );
    for option in [
        "--quick",
        "--out <DIR>",
        "--only <LIST>",
        "[default: txcast-report]",
    ] {
        assert!(help.contains(option), "{option} missing:\n{help}");
    }
    for (args, named) in [
        (&["reproduce", "--only", "009-fig1"][..], "--only"),
        (&["reproduce", "--bogus"][..], "--bogus"),
        (&["reproduce", "--out"][..], "--out"),
    ] {
        let out = txcast().args(args).output().expect("run txcast");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(named), "{args:?} does not name {named}: {err}");
    }
}

#[test]
fn the_smoke_report_renders_every_figure() {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("txcast-reproduce-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let started = std::time::Instant::now();
    let out = txcast()
        .args(["reproduce", "--smoke", "--out"])
        .arg(&dir)
        .output()
        .expect("run txcast reproduce");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "txcast reproduce --smoke failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "reproduce --smoke took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(
        stdout.contains("about "),
        "the run says up front how long it takes: {stdout}"
    );

    let html = std::fs::read_to_string(dir.join("index.html")).expect("index.html");
    let figures = figures();
    assert!(figures.len() >= 20, "{figures:?}");
    let mut measured = Vec::new();
    for (id, is_measured) in &figures {
        assert!(
            html.contains(&format!("id=\"{id}\"")),
            "{id} has no card in index.html"
        );
        if *is_measured {
            assert!(
                html.contains(&format!("src=\"{id}.png\"")),
                "{id} has no image in index.html"
            );
            assert!(dir.join(format!("{id}.svg")).exists(), "{id}.svg missing");
            let (w, h, ink, colours) = png_ink(&dir.join(format!("{id}.png")));
            assert!(w >= 600 && h >= 300, "{id}.png is {w}×{h}");
            assert!(
                ink > 0.01 && colours >= 3,
                "{id}.png looks blank: {:.2} % drawn, {colours} colours",
                ink * 100.0
            );
            measured.push(id.clone());
        } else {
            assert!(
                html.contains("Not measured yet"),
                "{id}: its card says what it needs"
            );
        }
    }
    assert!(
        !html.contains("The benchmark failed"),
        "a figure failed:\n{html}"
    );

    let Some(browser) = chromium() else {
        eprintln!(
            "skipped: headless Chromium check (chromium not installed; apt-get install chromium)"
        );
        return;
    };
    // A copy of the page that writes, once loaded, each image's natural size into the DOM.
    let check = dir.join("check.html");
    let script =
        "<script>window.addEventListener('load',()=>{const p=document.createElement('pre');\
                  p.id='imgcheck';p.textContent=[...document.querySelectorAll('img')]\
                  .map(i=>i.getAttribute('src')+'='+i.naturalWidth).join(' ');\
                  document.body.appendChild(p);});</script></body>";
    std::fs::write(&check, html.replace("</body>", script)).expect("write check.html");
    let profile = dir.join("chromium-profile");
    let dom = chromium_cmd(browser, &profile)
        .args(["--virtual-time-budget=10000", "--dump-dom"])
        .arg(format!("file://{}", check.display()))
        .output()
        .expect("run chromium");
    let dom = String::from_utf8_lossy(&dom.stdout);
    let found = dom
        .split("<pre id=\"imgcheck\">")
        .nth(1)
        .and_then(|s| s.split("</pre>").next())
        .unwrap_or_else(|| panic!("Chromium's DOM has no image check:\n{dom}"));
    let loaded: Vec<(&str, u32)> = found
        .split_whitespace()
        .filter_map(|e| {
            let (src, w) = e.rsplit_once('=')?;
            Some((src, w.parse().ok()?))
        })
        .collect();
    for id in &measured {
        let src = format!("{id}.png");
        let w = loaded.iter().find(|(s, _)| *s == src).map(|(_, w)| *w);
        assert!(
            w.is_some_and(|w| w > 0),
            "Chromium did not render {src} (natural width {w:?})"
        );
    }
    // And a screenshot of the page, as a person would see it.
    let shot = dir.join("screenshot.png");
    let status = chromium_cmd(browser, &profile)
        .args(["--window-size=1200,2000", "--virtual-time-budget=10000"])
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}", dir.join("index.html").display()))
        .output()
        .expect("run chromium");
    assert!(status.status.success(), "chromium --screenshot failed");
    let (w, h, ink, _) = png_ink(&shot);
    assert!(
        w == 1200 && h == 2000 && ink > 0.01,
        "the screenshot is blank ({w}×{h}, {ink})"
    );
    eprintln!(
        "Chromium rendered all {} figures; screenshot {}",
        measured.len(),
        shot.display()
    );
    // Kept for a look with TXCAST_KEEP_REPORT=1.
    if std::env::var_os("TXCAST_KEEP_REPORT").is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
}
