//! The pictures are drawn, as PNGs of the expected size, with the font the
//! project installs (Debian's fonts-dejavu-core).

use std::path::Path;

use allot::budget::BudgetTree;
use allot_sim::generate::{scenario, ScenarioParams};
use allot_sim::plot::{gantt, load_font, queue, shares, LevelStanding, QueueRow, DEFAULT_FONT};
use allot_sim::{simulate, ClusterSpec, Config, PolicyKind};

/// Width and height from a PNG's IHDR chunk.
fn png_size(path: &Path) -> (u32, u32) {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{} is not a PNG", path.display());
    let be = |i: usize| u32::from_be_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
    (be(16), be(20))
}

#[test]
fn gantt_and_share_pictures_are_drawn() {
    let font = load_font(Path::new(DEFAULT_FONT)).unwrap_or_else(|e| panic!("{e}"));
    let cluster = ClusterSpec { nodes: 4, gpus_per_node: 8 };
    let s = scenario(&ScenarioParams { cluster, days: 2.0, teams: 4, load: 1.5, seed: 3 });
    let tree = BudgetTree::parse(&s.budget_toml).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for policy in [PolicyKind::Allot, PolicyKind::Baseline] {
        let cfg = Config::new(cluster, tree.clone(), policy);
        let sim = simulate(&s.workload, &cfg, &mut |_| {});
        let g = dir.path().join(format!("gantt-{}.png", policy.name()));
        gantt(&g, &font, &tree, cluster, &sim.outcome, (0, 86_400)).unwrap();
        let (w, h) = png_size(&g);
        assert_eq!(w, 1600);
        assert!(h > 32 * 4, "one row per GPU: {h} px");
        let p = dir.path().join(format!("shares-{}.png", policy.name()));
        shares(&p, &font, &tree, cluster, &sim.outcome).unwrap();
        assert_eq!(png_size(&p).0, 1500);
    }
    // Too many GPUs for one row each: a clear refusal.
    let big = ClusterSpec { nodes: 75, gpus_per_node: 8 };
    let cfg = Config::new(big, tree.clone(), PolicyKind::Allot);
    let sim = simulate(&s.workload, &cfg, &mut |_| {});
    let e = gantt(&dir.path().join("x.png"), &font, &tree, big, &sim.outcome, (0, 3600)).unwrap_err();
    assert!(e.to_string().contains("at most 256 GPUs"), "{e}");
}

#[test]
fn a_missing_font_names_the_package_to_install() {
    let e = load_font(Path::new("/nonexistent/DejaVuSans.ttf")).unwrap_err();
    assert!(e.to_string().contains("fonts-dejavu-core"), "{e}");
}

/// The queue picture is as wide as its words: an empty queue still shows
/// the whole legend (it was cut at 660 px), and a long budget name widens
/// its level's column instead of running into the next level's.
#[test]
fn the_queue_picture_fits_its_words() {
    let font = load_font(Path::new(DEFAULT_FONT)).unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    let level = |name: &str| LevelStanding { name: name.to_owned(), ratio: 0.00022, sibling_rank: 1, siblings: 3 };
    let draw = |file: &str, rows: &[QueueRow]| {
        let path = dir.path().join(file);
        queue(&path, &font, "waiting jobs in allot's order", rows, 0).unwrap();
        png_size(&path).0
    };
    let empty = draw("empty.png", &[]);
    assert!(empty >= 750, "the legend is about 780 px of text: {empty} px");
    let row = |names: &[&str]| QueueRow { label: "job 1 (ana): 1 GPUs, 1h normal".into(), levels: names.iter().map(|n| level(n)).collect() };
    let short = draw("short.png", &[row(&["a", "b", "c"])]);
    let long_name = "a-budget-node-whose-name-is-as-long-as-a-sentence-of-a-manager";
    let long = draw("long.png", &[row(&["a", long_name, "c"]), row(&["a", "b", "c"])]);
    // Its column widens by the long name's extra width (62 characters more
    // than "b", at least 5 px each), and only its column.
    assert!(long >= short + 5 * 62, "short names {short} px, a long one {long} px");
    let long_everywhere = draw("long3.png", &[row(&[long_name, long_name, long_name])]);
    // Long names at all three levels widen all three columns: three times
    // what one did (a shared width would widen all three for one name).
    assert!(long_everywhere - short > 2 * (long - short), "short {short} px, one long name {long} px, three {long_everywhere} px");
}
