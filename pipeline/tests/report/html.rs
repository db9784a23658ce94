//! `report html` in headless Chromium, as clicked.

use std::path::Path;
use std::process::Command;

use crate::common::*;
use crate::setup::*;

/// The headless Chromium on PATH, if any.
fn chromium_exe() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|c| {
            Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
}

/// Headless Chromium driven through the DevTools protocol over a pipe
/// (`--remote-debugging-pipe`: commands in on fd 3, replies and events out on fd 4, each
/// a JSON text ending in a NUL byte), so that a test clicks, hovers and types as a person
/// would, with no WebSocket client. The browser runs under `timeout`: if it hangs, the
/// pipe closes and the test fails instead of waiting for ever.
struct Browser {
    child: std::process::Child,
    to: std::fs::File,
    from: std::io::BufReader<std::fs::File>,
    next: u64,
    session: Option<String>,
    events: Vec<serde_json::Value>,
}

impl Browser {
    fn launch(exe: &str, dir: &Path) -> Browser {
        let (cmd_in, cmd_out) = (dir.join("cdp-in"), dir.join("cdp-out"));
        for f in [&cmd_in, &cmd_out] {
            let st = Command::new("mkfifo").arg(f).status().expect("mkfifo");
            assert!(st.success(), "mkfifo {}", f.display());
        }
        let child = Command::new("bash")
            .args([
                "-c",
                r#"exec 3<"$1" 4>"$2"; exec timeout 120 "$3" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking --disable-component-update --disable-sync --hide-scrollbars --user-data-dir="$4" --remote-debugging-pipe about:blank"#,
                "chromium",
            ])
            .arg(&cmd_in)
            .arg(&cmd_out)
            .arg(exe)
            .arg(dir.join("profile"))
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start chromium");
        // Opened in the order the shell opens them (each open waits for the other end).
        let to = std::fs::OpenOptions::new()
            .write(true)
            .open(&cmd_in)
            .unwrap();
        let from = std::io::BufReader::new(std::fs::File::open(&cmd_out).unwrap());
        Browser {
            child,
            to,
            from,
            next: 0,
            session: None,
            events: Vec::new(),
        }
    }

    fn read(&mut self) -> serde_json::Value {
        use std::io::BufRead;
        let mut buf = Vec::new();
        let n = self.from.read_until(0, &mut buf).unwrap();
        assert!(n > 0 && buf.pop() == Some(0), "chromium closed the pipe");
        serde_json::from_slice(&buf).unwrap()
    }

    /// Send a command (to the attached page, once there is one) and wait for its reply.
    fn call(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        use std::io::Write;
        self.next += 1;
        let mut msg = serde_json::json!({"id": self.next, "method": method, "params": params});
        if let Some(s) = &self.session {
            msg["sessionId"] = s.clone().into();
        }
        let mut bytes = serde_json::to_vec(&msg).unwrap();
        bytes.push(0);
        self.to.write_all(&bytes).unwrap();
        loop {
            let m = self.read();
            if m["id"] == self.next {
                assert!(m.get("error").is_none(), "{method}: {}", m["error"]);
                return m["result"].clone();
            }
            self.events.push(m);
        }
    }

    fn wait_event(&mut self, method: &str) -> serde_json::Value {
        if let Some(i) = self.events.iter().position(|e| e["method"] == method) {
            return self.events.remove(i);
        }
        loop {
            let m = self.read();
            if m["method"] == method {
                return m;
            }
            self.events.push(m);
        }
    }

    /// The value of a JavaScript expression in the page.
    fn eval(&mut self, js: &str) -> serde_json::Value {
        let r = self.call(
            "Runtime.evaluate",
            serde_json::json!({"expression": js, "returnByValue": true, "awaitPromise": true}),
        );
        assert!(
            r.get("exceptionDetails").is_none(),
            "{js}: {}",
            r["exceptionDetails"]
        );
        r["result"]["value"].clone()
    }

    /// The numbers of a JavaScript array expression.
    fn numbers(&mut self, js: &str) -> Vec<f64> {
        let v = self.eval(js);
        let a = v.as_array().unwrap_or_else(|| panic!("{js}: {v}"));
        a.iter().map(|x| x.as_f64().unwrap()).collect()
    }

    fn mouse(&mut self, kind: &str, x: f64, y: f64) {
        self.call(
            "Input.dispatchMouseEvent",
            serde_json::json!({"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}),
        );
    }

    fn click(&mut self, x: f64, y: f64) {
        self.mouse("mouseMoved", x, y);
        self.mouse("mousePressed", x, y);
        self.mouse("mouseReleased", x, y);
    }

    /// Scroll the element `js` finds into the middle of the view; its centre.
    fn centre(&mut self, js: &str) -> (f64, f64) {
        let v = self.eval(&format!(
            "(() => {{ const e = {js}; e.scrollIntoView({{block: 'center'}}); \
             const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; }})()"
        ));
        (v[0].as_f64().unwrap(), v[1].as_f64().unwrap())
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Standard base64 (the screenshot Chromium sends).
fn unbase64(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let bytes: Vec<u8> = s.bytes().filter(|&c| c != b'=').map(val).collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for c in bytes.chunks(4) {
        let n = c
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &v)| n | (v as u32) << (18 - 6 * i));
        out.extend_from_slice(&n.to_be_bytes()[1..c.len()]);
    }
    out
}

/// The page as a person uses it, in headless Chromium: it loads nothing from outside;
/// hovering a flame graph frame names it, clicking it zooms in, the search box highlights
/// a function, a table sorts by the column clicked, the timeline is drawn; a screenshot
/// has text and colour (`TRACEMILL_SCREENSHOT=FILE` keeps it, to look at).
#[test]
fn html_report_works_in_chromium_as_clicked() {
    let (tmp, out) = decoded("recursion");
    let html = tmp.path().join("report.html");
    ok(&["report", "html", s(&out), "--out", s(&html)]);
    let page = std::fs::read_to_string(&html).unwrap();
    // Self-contained: no resource from elsewhere (the one outside address, Perfetto's,
    // is only opened by its button).
    for needle in [
        "src=\"http",
        "href=\"http",
        "src=\"//",
        "<link",
        "@import",
        "url(http",
    ] {
        assert!(!page.contains(needle), "the page fetches {needle}");
    }
    assert!(
        !page.contains("<img"),
        "the flame graph is inline, not a picture"
    );
    let Some(exe) = chromium_exe() else {
        return missing_tool("chromium not found: install chromium (apt-get install chromium)");
    };
    let mut b = Browser::launch(exe, tmp.path());
    let target = b.call(
        "Target.createTarget",
        serde_json::json!({"url": "about:blank"}),
    );
    let attached = b.call(
        "Target.attachToTarget",
        serde_json::json!({"targetId": target["targetId"], "flatten": true}),
    );
    b.session = Some(attached["sessionId"].as_str().unwrap().to_string());
    b.call(
        "Emulation.setDeviceMetricsOverride",
        serde_json::json!({"width": 1280, "height": 1000, "deviceScaleFactor": 1, "mobile": false}),
    );
    b.call("Network.enable", serde_json::json!({}));
    b.call("Page.enable", serde_json::json!({}));
    let url = format!("file://{}", html.display());
    b.call("Page.navigate", serde_json::json!({"url": url}));
    b.wait_event("Page.loadEventFired");
    let fetched: Vec<String> = b
        .events
        .iter()
        .filter(|e| e["method"] == "Network.requestWillBeSent")
        .map(|e| {
            e["params"]["request"]["url"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect();
    for u in &fetched {
        assert!(
            u.starts_with("file://") || u.starts_with("data:") || u.starts_with("blob:"),
            "the page fetched {u}"
        );
    }

    // The sections, in the order of the navigation bar, the flame graph near the top.
    let nav = b.eval("[...document.querySelectorAll('nav a')].map(a => a.textContent).join('|')");
    assert!(
        nav.as_str()
            .unwrap()
            .starts_with("Summary|Flame graph|Hotspots|Coverage|Timeline"),
        "{nav}"
    );
    let tops = b.numbers(
        "['summary','flamegraph','hotspots'].map(id => document.getElementById(id).offsetTop)",
    );
    assert!(tops[0] < tops[1] && tops[1] < tops[2], "{tops:?}");

    // Hover: inferno's details line names the frame under the pointer.
    let widest_fib = "[...document.querySelectorAll('#frames > g')].filter(g => /^fib /.test(g.querySelector('title').textContent)).sort((a, b) => b.querySelector('rect').getBBox().width - a.querySelector('rect').getBBox().width)[0]";
    let frames = b.eval("document.querySelectorAll('#frames > g').length");
    assert!(frames.as_u64().unwrap() > 20, "{frames} frames drawn");
    let (x, y) = b.centre(widest_fib);
    let before = b.eval(&format!(
        "{widest_fib}.querySelector('rect').getBoundingClientRect().width"
    ));
    b.mouse("mouseMoved", x, y);
    let details = b.eval("document.getElementById('details').textContent");
    assert!(
        details.as_str().unwrap().contains("fib ("),
        "hovering fib shows {details}"
    );

    // Click: the frame fills the width, frames off its path are hidden, "Reset Zoom" shows.
    b.click(x, y);
    let after = b.eval("(() => { const g = [...document.querySelectorAll('#frames > g')].find(g => g.querySelector('rect').getAttribute('width').startsWith('100.0') && /^fib /.test(g.querySelector('title').textContent)); return g ? g.querySelector('rect').getBoundingClientRect().width : 0; })()");
    assert!(
        after.as_f64().unwrap() > before.as_f64().unwrap() * 1.5,
        "zoom: fib's frame was {before} px wide, is {after}"
    );
    let hidden = b.eval("document.querySelectorAll('#frames > g.hide').length");
    assert!(hidden.as_u64().unwrap() > 0, "zoom hid no frame");
    let unzoom = b.eval("document.getElementById('unzoom').classList.contains('hide')");
    assert_eq!(unzoom, false, "the Reset Zoom button stays hidden");

    // The page's reset button, then the search box: insert's frames, and only they, turn
    // inferno's search colour.
    let (rx, ry) = b.centre("document.getElementById('fg-reset')");
    b.click(rx, ry);
    let hidden = b.eval("document.querySelectorAll('#frames > g.hide').length");
    assert_eq!(hidden, 0, "reset left frames hidden");
    let (fx, fy) = b.centre("document.getElementById('fg-find')");
    b.click(fx, fy);
    b.call("Input.insertText", serde_json::json!({"text": "^insert$"}));
    let lit = b.eval("[...document.querySelectorAll('#frames > g')].filter(g => g.querySelector('rect').getAttribute('fill') === searchcolor).map(g => g.querySelector('title').textContent.split(' ')[0])");
    let lit: Vec<&str> = lit
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(!lit.is_empty(), "search highlighted nothing");
    assert!(
        lit.iter().all(|n| *n == "insert"),
        "search highlighted {lit:?}"
    );
    let matched = b.eval("document.getElementById('fg-matched').textContent");
    assert!(
        matched.as_str().unwrap().starts_with("Matched: "),
        "{matched}"
    );

    // Sorting: the hotspots by calls, most first, then fewest first.
    let calls =
        "[...document.querySelectorAll('#hotspots tbody tr')].map(r => +r.cells[5].dataset.v)";
    let (hx, hy) = b.centre("document.querySelectorAll('#hotspots th')[5]");
    b.click(hx, hy);
    let v = b.numbers(calls);
    assert!(v.len() > 3 && v.windows(2).all(|w| w[0] >= w[1]), "{v:?}");
    b.click(hx, hy);
    let v = b.numbers(calls);
    assert!(v.windows(2).all(|w| w[0] <= w[1]), "{v:?}");

    // The timeline preview has spans drawn on it.
    let inked = b.eval("(() => { const c = document.getElementById('tl-canvas'); const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let n = 0; for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 0) n++; return n; })()");
    assert!(
        inked.as_u64().unwrap() > 1000,
        "timeline preview: {inked} pixels drawn"
    );

    // A screenshot of the top of the page (after scrolling back): text and colour.
    b.eval("window.scrollTo(0, 0); document.getElementById('fg-find').value = ''; document.getElementById('fg-find').dispatchEvent(new Event('input'))");
    let shot = b.call(
        "Page.captureScreenshot",
        serde_json::json!({"format": "png"}),
    );
    let png_bytes = unbase64(shot["data"].as_str().unwrap());
    if let Ok(keep) = std::env::var("TRACEMILL_SCREENSHOT") {
        std::fs::write(keep, &png_bytes).unwrap();
    }
    let decoder = png::Decoder::new(std::io::Cursor::new(png_bytes));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let px = &buf[..info.buffer_size()];
    let step = info.color_type.samples();
    let mut colors = std::collections::HashSet::new();
    let mut dark = 0usize;
    for p in px.chunks(step) {
        colors.insert(p[..3.min(step)].to_vec());
        dark += usize::from(p[0] < 128);
    }
    assert!(
        colors.len() > 50,
        "screenshot has {} colours: blank?",
        colors.len()
    );
    assert!(dark > 1000, "screenshot has {dark} dark pixels: no text?");
}
