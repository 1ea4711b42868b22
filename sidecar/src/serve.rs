//! `allot serve`: a read-only web page over the ledger, and `/metrics`.
//!
//! - `/`: the cluster's figures (`allot report`), the budget tree with each
//!   node's use against what it was owed and its standing in the plugins'
//!   last ranking, the waiting jobs in allot's order with their budgets'
//!   standing level by level, the pictures, and a box to explain any job.
//! - `/why?job=N`: `allot why N`.
//! - `/shares.png`, `/queue.png`: the pictures of `allot report --plots`.
//! - `/metrics`: the same figures in the Prometheus (OpenMetrics) text format.
//!
//! Every request opens the ledger read-only, so the page is as fresh as the
//! plugins' last recompute. Binds to localhost unless told otherwise. One
//! request at a time: it is a window for people and a scrape target, not
//! a service under load.

use allot_ledger::Location;
use std::io::Read as _;
use std::path::Path;
use std::sync::atomic::AtomicU64;

use allot_ledger::Ledger;
use allot_sim::metrics::human;
use allot_sim::plot;
use anyhow::{anyhow, Context};
use maud::{html, Markup, PreEscaped, DOCTYPE};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tiny_http::{Header, Response, Server};

use crate::cluster_report::{compute_with_timelines, draw_queue, draw_shares, queue_rows, ClusterReport, QueueView, Timelines};

/// What `allot serve` serves.
pub struct Site {
    pub ledger: Location,
    /// The cluster shown by default (`--cluster`; a page's `?cluster=NAME`
    /// shows another); `None`: the lab, every cluster of the ledger.
    pub cluster: Option<String>,
    /// The span of the figures, seconds before now.
    pub since: i64,
    /// `None`: no font, so no pictures (the page says why).
    pub font: Option<plot::Font>,
    pub font_problem: Option<String>,
    /// The last integrity check (time, passed): SQLite's quick check reads
    /// the whole file, too much for every scrape.
    pub checked: std::sync::Mutex<Option<(i64, bool)>>,
}

/// How often `/metrics` repeats the ledger's integrity check.
const CHECK_EVERY: i64 = 600;

/// A response: status, content type, body.
pub struct Page {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

impl Page {
    fn html(status: u16, markup: Markup) -> Page {
        Page { status, content_type: "text/html; charset=utf-8", body: markup.into_string().into_bytes() }
    }
    fn text(status: u16, text: String) -> Page {
        Page { status, content_type: "text/plain; charset=utf-8", body: text.into_bytes() }
    }
}

const STYLE: &str = "body{font-family:sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse;margin:.5em 0 1.5em}\
td,th{padding:2px 8px;border-bottom:1px solid #ddd;text-align:right}td:first-child,th:first-child{text-align:left}\
.under{background:#d9f0d9}.over{background:#f6d6d2}pre{background:#f6f6f6;padding:1em}img{max-width:100%;border:1px solid #ddd}\
.figures span{margin-right:2em}";

fn shell(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head { meta charset="utf-8"; title { (title) } style { (PreEscaped(STYLE)) } }
            body { (body) }
        }
    }
}

/// Green below 1 (under its share), red above.
fn standing_class(ratio: f64) -> &'static str {
    if ratio <= 1.0 {
        "under"
    } else {
        "over"
    }
}

fn pct(x: Option<f64>) -> String {
    x.map_or("-".into(), |x| format!("{:.0}%", 100.0 * x))
}

impl Site {
    /// Answers one request for `url` (path and query) at time `now`.
    pub fn answer(&self, url: &str, now: i64) -> Page {
        let (path, query) = url.split_once('?').unwrap_or((url, ""));
        // `?cluster=NAME`: one cluster of a ledger that several share.
        let asked = query.split('&').find_map(|kv| kv.strip_prefix("cluster="));
        if let Some(c) = asked.filter(|c| c.is_empty() || !c.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '-')) {
            return Page::text(400, format!("cluster={c}: a cluster name is letters, digits, '_' and '-'\n"));
        }
        let cluster = asked.or(self.cluster.as_deref());
        let result = match path {
            "/" => self.front(now, cluster),
            "/why" => self.why(query, cluster),
            "/shares.png" | "/queue.png" => self.picture(path, now, cluster),
            "/metrics" => self.metrics(now, cluster),
            _ => return Page::text(404, format!("no page {path}: try / or /metrics\n")),
        };
        result.unwrap_or_else(|e| Page::html(500, shell("allot: error", html! { h1 { "allot could not read the ledger" } pre { (format!("{e:#}")) } })))
    }

    /// The ledger, as `cluster` (`None`: the lab).
    fn open(&self, cluster: Option<&str>) -> anyhow::Result<Ledger> {
        crate::open_reader(&self.ledger, cluster, crate::Reads::LabOrCluster, "/?cluster=NAME")
    }

    /// The clusters to link to when the page shows the lab of several (each
    /// orders its own queue); empty for one cluster's page.
    fn lab_of(l: &Ledger) -> anyhow::Result<Vec<String>> {
        if l.cluster().is_some() {
            return Ok(Vec::new());
        }
        let named: Vec<String> = l.clusters()?.into_iter().filter(|c| !c.is_empty()).collect();
        Ok(if named.len() > 1 { named } else { Vec::new() })
    }

    fn report(&self, now: i64, cluster: Option<&str>) -> anyhow::Result<(Ledger, ClusterReport, Timelines)> {
        let l = self.open(cluster)?;
        let (report, timelines) = compute_with_timelines(&l, self.since, now)?;
        Ok((l, report, timelines))
    }

    fn front(&self, now: i64, cluster: Option<&str>) -> anyhow::Result<Page> {
        let (l, r, t) = self.report(now, cluster)?;
        let tree = &t.tree;
        let snapshot = l.ranked_usage(tree)?;
        let ranking = snapshot.as_ref().map(|s| s.ranking(tree));
        let lab = Self::lab_of(&l)?;
        let QueueView { rows: queue, more, .. } = queue_rows(&l, tree)?;
        // Links within this page's cluster.
        let here = |path: &str| match l.cluster().filter(|_| cluster.is_some()) {
            Some(c) => format!("{path}{}cluster={c}", if path.contains('?') { "&" } else { "?" }),
            None => path.to_owned(),
        };
        let title = match (l.cluster(), lab.is_empty()) {
            (Some(c), _) => format!("allot: cluster {c}, "),
            (None, false) => format!("allot: the lab ({}), ", lab.join(", ")),
            (None, true) => "allot: ".to_owned(),
        };
        let ranked_at =
            snapshot.as_ref().map_or("Not ranked yet".to_owned(), |s| format!("In the order of the plugins' ranking at {}", crate::format_time(s.computed_at)));
        let ranked = snapshot
            .as_ref()
            .map_or("the plugins have not ranked the budgets yet".to_owned(), |s| format!("ranked by the plugins at {}", crate::format_time(s.computed_at)));
        let body = html! {
            h1 { (title) (r.gpus) " GPUs, budget version " (r.budget_version) }
            @if !lab.is_empty() {
                p { "Each cluster orders its own queue: " @for c in &lab { a href=(format!("/?cluster={c}")) { (c) } " " } }
            }
            p { "From " (crate::format_time(r.from)) " to " (crate::format_time(r.to)) " (" (human(r.span_seconds)) "), ledger " code { (r.ledger) } "; " (ranked) "." }
            p.figures {
                span { "occupancy " b { (format!("{:.1}%", 100.0 * r.occupancy)) } }
                span { "unallocated " b { (format!("{:.1}%", 100.0 * r.unallocated_fraction)) } }
                span { "wait p50/p90 " b { (human(r.wait_p50_s)) " / " (human(r.wait_p90_s)) } }
                span { "preemptions " b { (r.preemptions) } }
                span { "budgets at 95% of owed " b { (format!("{:.0}%", 100.0 * r.teams_at_95pct_of_owed)) } }
                span { "owing allocated work first " b { (format!("{:.0}%", 100.0 * r.teams_at_95pct_of_owed_allocated_first)) } }
                span { "waiting jobs " b { (queue.len() + more) } }
            }
            h2 id="tree" { "Budgets" }
            p {
                "GPU-hours over the span. Owed: each hour the cluster's GPUs shared down the tree, each budget capped at what its jobs wanted; owing allocated work first, free work (min_runtime=0) is owed only what allocated work left, as the contract serves it. Standing: the part of its share the budget used over the plugins' window (green under, red over) and its place among its siblings (least used first), which orders the queue."
                @if tree.settings.lookahead > 0 {
                    " Its use counts the GPUs its jobs hold as used " (allot::duration::format_duration(tree.settings.lookahead)) " longer (the budget's lookahead)."
                }
            }
            table {
                tr { th { "budget" } th { "share" } th { "demand" } th { "owed" } th { "delivered" } th { "delivered / owed" } th title="delivered / owed, owing allocated work first (see above)" { "allocated first" } th { "charged" } th { "unallocated" } th { "standing" } }
                @for (id, n) in r.nodes.iter().enumerate() {
                    @let depth = if n.path.is_empty() { 0 } else { n.path.matches('/').count() + 1 };
                    @let name = if n.path.is_empty() { "(cluster)".to_owned() } else { n.path.rsplit('/').next().unwrap_or("").to_owned() };
                    tr {
                        td style=(format!("padding-left:{}em", 0.5 + 1.5 * depth as f64)) title=(n.path) { (name) }
                        td { (format!("{:.1}%", 100.0 * n.effective_share)) }
                        td { (format!("{:.2}", n.demand_gpu_hours)) }
                        td { (format!("{:.2}", n.owed_gpu_hours)) }
                        td { (format!("{:.2}", n.delivered_gpu_hours)) }
                        td { (pct(n.delivered_over_owed)) }
                        td { (pct(n.delivered_over_owed_allocated_first)) }
                        td { (format!("{:.2}", n.charged_gpu_hours)) }
                        td { (format!("{:.2}", n.unallocated_gpu_hours)) }
                        @match ranking.as_ref().filter(|_| id > 0) {
                            Some(rk) => {
                                @let s = rk.standings[id];
                                td class=(standing_class(s.ratio)) { (s.in_words()) }
                            }
                            None => td { "-" }
                        }
                    }
                }
            }
            h2 id="queue" { "Waiting jobs" }
            @if !lab.is_empty() {
                p { "Each cluster orders its own: " @for c in &lab { a href=(format!("/?cluster={c}#queue")) { (c) } " " } }
            } @else {
            p { (ranked_at) ". First to start at the top: allocated jobs first, then by budget, level by level, then declared priority, then submission." }
            @if queue.is_empty() { p { "No job is waiting." } } @else {
                table {
                    tr { th { "job" } th colspan="4" { "its budget's standing, level by level" } }
                    @for (job, row) in &queue {
                        tr {
                            td { a href=(here(&format!("/why?job={job}"))) { (row.label) } }
                            @for s in &row.levels {
                                td class=(standing_class(s.ratio)) { (s.name) ": " (s.standing().in_words()) }
                            }
                        }
                    }
                }
                @if more > 0 { p { "... and " (more) " more." } }
            }
            }
            h2 id="why" { "Why is a job where it is?" }
            form action="/why" method="get" {
                "Job " input type="number" name="job" min="1" required; " "
                @if let (Some(c), Some(_)) = (l.cluster(), cluster) { input type="hidden" name="cluster" value=(c); }
                button type="submit" { "explain" }
            }
            h2 id="pictures" { "Pictures" }
            @match &self.font_problem {
                Some(problem) => p { "No pictures: " (problem) }
                None => {
                    p { img src=(here("/shares.png")) alt="each budget leaf's GPUs held against what it was owed and its share"; }
                    @if lab.is_empty() {
                        p { img src=(here("/queue.png")) alt="the waiting jobs in allot's order with their budgets' standing"; }
                    }
                }
            }
            @for w in &r.warnings { p { "Note: " (w) } }
            p { a href=(here("/metrics")) { "/metrics" } " (Prometheus)" }
        };
        Ok(Page::html(200, shell("allot", body)))
    }

    fn why(&self, query: &str, cluster: Option<&str>) -> anyhow::Result<Page> {
        let job = query.split('&').find_map(|kv| kv.strip_prefix("job=")).unwrap_or("");
        let back = html! { p { a href="/" { "back to the cluster" } } };
        let Ok(id) = job.trim().parse::<u32>() else {
            return Ok(Page::html(400, shell("allot why", html! { h1 { "allot why" } p { "Give a job number: " code { "/why?job=42" } } (back) })));
        };
        let mut l = self.open(cluster)?;
        crate::report::scope_to_the_job(&mut l, id)?;
        let (status, text) = match crate::report::why_text(&l, id) {
            Ok(text) => (200, text),
            Err(e) => (404, format!("{e:#}")),
        };
        Ok(Page::html(status, shell(&format!("allot why {id}"), html! { h1 { "allot why " (id) } pre { (text) } (back) })))
    }

    fn picture(&self, path: &str, now: i64, cluster: Option<&str>) -> anyhow::Result<Page> {
        let Some(font) = &self.font else {
            return Ok(Page::text(503, format!("no pictures: {}\n", self.font_problem.as_deref().unwrap_or("no font"))));
        };
        let (l, r, t) = self.report(now, cluster)?;
        if path == "/queue.png" && !Self::lab_of(&l)?.is_empty() {
            return Ok(Page::text(404, "each cluster orders its own queue: /queue.png?cluster=NAME\n".to_owned()));
        }
        let dir = tempfile::tempdir().context("a temporary directory for the picture")?;
        let file = if path == "/shares.png" { draw_shares(dir.path(), font, &r, &t, None)? } else { draw_queue(dir.path(), font, &l, &t.tree)? };
        let body = std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
        Ok(Page { status: 200, content_type: "image/png", body })
    }

    fn metrics(&self, now: i64, cluster: Option<&str>) -> anyhow::Result<Page> {
        let (l, r, t) = self.report(now, cluster)?;
        let mut registry = Registry::default();
        let per_budget = |registry: &mut Registry, name: &str, help: &str, value: &dyn Fn(&crate::cluster_report::NodeStats) -> f64| {
            let family = Family::<Vec<(String, String)>, Gauge<f64, AtomicU64>>::default();
            registry.register(name, help, family.clone());
            for n in &r.nodes {
                let budget = if n.path.is_empty() { "/".to_owned() } else { n.path.clone() };
                family.get_or_create(&vec![("budget".to_owned(), budget)]).set(value(n));
            }
        };
        per_budget(&mut registry, "allot_delivered_gpu_hours", "GPU-hours the budget's runs held over the span", &|n| n.delivered_gpu_hours);
        per_budget(&mut registry, "allot_owed_gpu_hours", "GPU-hours the budget was owed over the span, given its demand", &|n| n.owed_gpu_hours);
        per_budget(&mut registry, "allot_charged_gpu_hours", "GPU-hours charged to the budget over the span", &|n| n.charged_gpu_hours);
        per_budget(&mut registry, "allot_unallocated_gpu_hours", "GPU-hours of the budget's unallocated (min_runtime=0) runs over the span", &|n| {
            n.unallocated_gpu_hours
        });
        per_budget(&mut registry, "allot_demand_gpu_hours", "GPU-hours the budget's jobs wanted (pending or running) over the span", &|n| n.demand_gpu_hours);
        let gauge = |registry: &mut Registry, name: &str, help: &str, v: f64| {
            let g = Gauge::<f64, AtomicU64>::default();
            g.set(v);
            registry.register(name, help, g);
        };
        let QueueView { rows: queue, more, .. } = queue_rows(&l, &t.tree)?;
        let snapshot = l.usage_snapshot()?;
        gauge(&mut registry, "allot_occupancy_ratio", "GPU-seconds delivered over the cluster's GPU-seconds in the span", r.occupancy);
        gauge(&mut registry, "allot_unallocated_ratio", "share of the delivered GPU-seconds that ran unallocated", r.unallocated_fraction);
        gauge(&mut registry, "allot_gpus", "GPUs of the cluster", r.gpus as f64);
        gauge(&mut registry, "allot_waiting_jobs", "jobs waiting, as the ledger last heard", (queue.len() + more) as f64);
        gauge(&mut registry, "allot_preemptions", "preemptions in the span", r.preemptions as f64);
        gauge(&mut registry, "allot_span_seconds", "length of the span the figures cover", r.span_seconds as f64);
        // Ledger health: how long ago the plugins last wrote a ranking, and the file's integrity.
        gauge(
            &mut registry,
            "allot_ledger_ranked_age_seconds",
            "seconds since the priority plugin last wrote its ranking (-1: never)",
            snapshot.map_or(-1.0, |s| (now - s.computed_at) as f64),
        );
        let ok = {
            let mut checked = self.checked.lock().unwrap_or_else(|p| p.into_inner());
            match *checked {
                Some((at, ok)) if now - at < CHECK_EVERY => ok,
                _ => {
                    let ok = l.check()?.is_empty();
                    *checked = Some((now, ok));
                    ok
                }
            }
        };
        gauge(
            &mut registry,
            "allot_ledger_ok",
            "1 when the ledger passed SQLite's quick check (repeated every 10 minutes at most)",
            if ok { 1.0 } else { 0.0 },
        );
        let mut out = String::new();
        encode(&mut out, &registry).map_err(|e| anyhow!("encoding the metrics: {e}"))?;
        Ok(Page { status: 200, content_type: "application/openmetrics-text; version=1.0.0; charset=utf-8", body: out.into_bytes() })
    }
}

/// `allot serve`: answers until killed.
pub fn run(ledger: &Location, cluster: crate::ClusterScope<'_>, listen: &str, since: Option<&str>, font: &Path) -> anyhow::Result<()> {
    let since = crate::cluster_report::parse_since(since)?;
    // Fail early on a ledger that cannot be read at all.
    drop(crate::open_reader(ledger, cluster, crate::Reads::LabOrCluster, "allot serve --cluster NAME")?);
    let (font, font_problem) = match plot::load_font(font) {
        Ok(f) => (Some(f), None),
        Err(e) => (None, Some(e.to_string())),
    };
    let site = Site { ledger: ledger.to_owned(), cluster: cluster.map(str::to_owned), since, font, font_problem, checked: std::sync::Mutex::new(None) };
    let server = Server::http(listen).map_err(|e| anyhow!("cannot listen on {listen}: {e}"))?;
    let addr = server.server_addr().to_ip().map_or_else(|| listen.to_owned(), |a| a.to_string());
    println!("allot serve: http://{addr}/ (read-only; ledger {})", ledger);
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    for mut request in server.incoming_requests() {
        // Requests carry no body worth reading; drain a small one.
        let mut sink = Vec::new();
        let _ = request.as_reader().take(64 * 1024).read_to_end(&mut sink);
        let url = request.url().to_owned();
        let page = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| site.answer(&url, crate::now())))
            .unwrap_or_else(|_| Page::text(500, "allot serve: this page failed (see the log); the others still work\n".to_owned()));
        let header = Header::from_bytes(&b"Content-Type"[..], page.content_type.as_bytes()).expect("a valid header");
        let response = Response::from_data(page.body).with_status_code(page.status).with_header(header);
        if let Err(e) = request.respond(response) {
            eprintln!("allot serve: {url}: cannot answer: {e}");
        }
    }
    Ok(())
}
