use super::*;

const LAB: &str = r#"
[cluster]
gpus = 32
lookback = "7d"

[default_leaf]
dave = "vision/tracking"

[budget]
owners = ["director"]

[budget.vision]
share = 70
owners = ["alice"]

[budget.vision.tracking]
share = 1
owners = ["carol"]
accounts = ["Tracking"]
members = ["dave"]

[budget.vision.segmentation]
share = 1
accounts = ["seg"]
members = ["dave", "erin"]

[budget.nlp]
share = 30
owners = ["frank"]
accounts = ["nlp"]
members = ["*"]
"#;

fn lab() -> BudgetTree {
    BudgetTree::parse(LAB).unwrap_or_else(|e| panic!("{e}"))
}

/// Found by fuzzing (fuzz/corpus/budget/huge-shares.toml): shares
/// whose sum overflows to infinity gave every leaf an effective share of 0.
#[test]
fn huge_shares_still_sum_to_one() {
    let t = BudgetTree::parse(
        "[budget]\n[budget.a]\nshare = 1e308\naccounts = [\"a\"]\nmembers = [\"*\"]\n\
         [budget.b]\nshare = 1.7e308\naccounts = [\"b\"]\nmembers = [\"x\"]\n",
    )
    .unwrap();
    let eff = |p: &str| t.node(t.find(p).unwrap()).effective_share;
    assert!((eff("a") - 1.0 / 2.7).abs() < 1e-12, "{}", eff("a"));
    assert!((eff("b") - 1.7 / 2.7).abs() < 1e-12, "{}", eff("b"));
    assert!((eff("a") + eff("b") - 1.0).abs() < 1e-12);
}

/// A share so much smaller than a sibling's that its node's effective
/// share is (or underflows to) next to nothing would rank that node's
/// jobs by dividing by zero: refused at the smaller share, naming the
/// larger; as are effective shares made tiny by depth alone.
#[test]
fn shares_that_leave_a_node_next_to_nothing_are_refused() {
    let leaf = |name: &str, share: &str| format!("[budget.{name}]\nshare = {share}\naccounts = [\"{name}\"]\n");
    let e = errors(&format!("[budget]\n{}{}{}", leaf("a", "1e308"), leaf("b", "1"), leaf("c", "5e-324")));
    let got: Vec<(Option<usize>, &str, &str)> = e.iter().map(|e| (e.line, e.field.as_str(), e.message.as_str())).collect();
    assert_eq!(
        got,
        [
            (
                Some(6),
                "budget.b.share",
                "the node's effective share of the cluster is 1e-308, below the least allowed, 1e-12: its share 1 is 1e-308 of the sum of its and its siblings' shares, 1e308 (the largest: a's 1e308, line 3); give siblings shares of more similar sizes"
            ),
            (
                Some(9),
                "budget.c.share",
                "the node's effective share of the cluster is 0, below the least allowed, 1e-12: its share 5e-324 is 0 of the sum of its and its siblings' shares, 1e308 (the largest: a's 1e308, line 3); give siblings shares of more similar sizes"
            ),
        ]
    );
    // About the bound: a share 1e-11 of the sum is allowed, 1e-12 less a little is not.
    assert!(BudgetTree::parse(&format!("[budget]\n{}{}", leaf("a", "1e11"), leaf("b", "1"))).is_ok());
    let e = errors(&format!("[budget]\n{}{}", leaf("a", "1e12"), leaf("b", "1")));
    assert_eq!((e.len(), e[0].field.as_str()), (1, "budget.b.share"), "{e:?}");
    assert!(
        e[0].message
            .contains("effective share of the cluster is 9.99999999999e-13, below the least allowed, 1e-12: its share 1 is 9.99999999999e-13 of the sum"),
        "{e:?}"
    );
    // Depth: 1e-5 at each of three levels is 1e-15 of the cluster; only
    // the topmost node below the bound is named.
    let text = "[budget]\n[budget.big]\nshare = 99999\naccounts = [\"big\"]\n\
                [budget.x]\nshare = 1\n[budget.x.big]\nshare = 99999\naccounts = [\"xbig\"]\n\
                [budget.x.y]\nshare = 1\n[budget.x.y.big]\nshare = 99999\naccounts = [\"ybig\"]\n\
                [budget.x.y.z]\nshare = 1\n[budget.x.y.z.w]\nshare = 1\naccounts = [\"w\"]\n";
    let e = errors(text);
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!((e[0].line, e[0].field.as_str()), (Some(16), "budget.x.y.z.share"));
    assert!(e[0].message.starts_with("the node's effective share of the cluster is 1e-15, below the least allowed, 1e-12: the product of its and its ancestors' fractions of their siblings' shares, down x/y/z"), "{e:?}");
}

#[test]
fn effective_shares_are_products_of_normalized_shares() {
    let t = lab();
    let eff = |p: &str| t.node(t.find(p).unwrap()).effective_share;
    assert!((eff("vision") - 0.7).abs() < 1e-12);
    assert!((eff("vision/tracking") - 0.35).abs() < 1e-12);
    assert!((eff("nlp") - 0.3).abs() < 1e-12);
    assert_eq!(t.leaves.len(), 3);
    assert_eq!(t.settings.gpus, Some(32));
}

#[test]
fn jobs_find_their_leaf() {
    let t = lab();
    let path = |r: Result<LeafId, LeafRefusal>| t.leaf_node(r.unwrap()).path.clone();
    assert_eq!(path(t.leaf_for_job("dave", None)), "vision/tracking");
    assert_eq!(path(t.leaf_for_job("dave", Some("SEG"))), "vision/segmentation");
    assert_eq!(path(t.leaf_for_job("erin", None)), "vision/segmentation");
    // Not listed anywhere: the one open leaf.
    assert_eq!(path(t.leaf_for_job("zoe", None)), "nlp");
    let refusal = t.leaf_for_job("erin", Some("tracking")).unwrap_err();
    let text = refusal.to_string();
    assert!(text.contains("not a member of budget vision/tracking"), "{text}");
    assert!(text.contains("seg, nlp"), "{text}");
    assert!(matches!(t.leaf_for_job("erin", Some("nope")), Err(LeafRefusal::UnknownAccount { .. })));
}

/// One budget, several clusters: `clusters` funds a node on some only,
/// `cluster_shares` sets its share on one; each cluster's view shares
/// its own GPUs that way, and the lab's is the tree as written.
#[test]
fn clusters_fund_nodes_and_set_shares_per_cluster() {
    let text = "[budget]\n[budget.vision]\nshare = 3\ncluster_shares = { beta = 1 }\n[budget.vision.a]\nshare = 1\naccounts = [\"a\"]\n[budget.vision.b]\nshare = 1\naccounts = [\"b\"]\nclusters = [\"Alpha\"]\n[budget.nlp]\nshare = 1\naccounts = [\"nlp\"]\n";
    let t = BudgetTree::parse(text).unwrap();
    let eff = |t: &BudgetTree, p: &str| t.node(t.find(p).unwrap()).effective_share;
    // As written (the lab, and every cluster the file does not name).
    assert_eq!((eff(&t, "vision"), eff(&t, "vision/b"), eff(&t, "nlp")), (0.75, 0.375, 0.25));
    assert_eq!(t.for_cluster(None), t);
    let gamma = t.for_cluster(Some("gamma"));
    assert_eq!((eff(&gamma, "vision/a"), eff(&gamma, "vision/b")), (0.75, 0.0), "b is funded on alpha only (names are lower-cased)");
    let alpha = t.for_cluster(Some("alpha"));
    assert_eq!((eff(&alpha, "vision/a"), eff(&alpha, "vision/b"), eff(&alpha, "nlp")), (0.375, 0.375, 0.25));
    let beta = t.for_cluster(Some("beta"));
    assert_eq!((eff(&beta, "vision"), eff(&beta, "vision/a"), eff(&beta, "vision/b"), eff(&beta, "nlp")), (0.5, 0.5, 0.0, 0.5));
    assert!(!beta.is_funded(beta.find("vision/b").unwrap()) && beta.is_funded(beta.find("vision/a").unwrap()));
    assert_eq!(t.funded_clusters(t.find("vision/b").unwrap()), Some(&["alpha".to_owned()][..]));
    assert_eq!(t.node(t.find("vision").unwrap()).funding(), "on every cluster (beta: share 1)");
    assert_eq!(t.named_clusters().into_iter().collect::<Vec<_>>(), vec!["alpha", "beta"]);
    // An unfunded node is never owed: unused, it still ranks after a
    // sibling that used its share.
    let r = crate::fairshare::Ranking::compute(&beta, &[50, 0, 0], 8, 0);
    let (a, b) = (beta.node(beta.find("vision/a").unwrap()).leaf.unwrap(), beta.node(beta.find("vision/b").unwrap()).leaf.unwrap());
    assert!(r.leaf_rank[b as usize] > r.leaf_rank[a as usize], "{:?}", r.leaf_rank);
    // A change of funding is the parent's owners' to make, like a share.
    // A node none of whose children is funded on a cluster is not either:
    // its siblings share that cluster's GPUs.
    let only_alpha = BudgetTree::parse(&text.replace("accounts = [\"a\"]\n", "accounts = [\"a\"]\nclusters = [\"alpha\"]\n")).unwrap();
    let beta_only_nlp = only_alpha.for_cluster(Some("beta"));
    assert_eq!((eff(&beta_only_nlp, "vision"), eff(&beta_only_nlp, "nlp")), (0.0, 1.0));
    let edited = BudgetTree::parse(&text.replace("clusters = [\"Alpha\"]", "clusters = [\"alpha\", \"beta\"]")).unwrap();
    let changes = edited.diff(&t);
    assert_eq!(changes.iter().map(|c| c.to_string()).collect::<Vec<_>>(), vec!["~ vision/b funded on alpha -> on alpha, beta"]);
}

#[test]
fn cluster_funding_errors_name_line_and_field() {
    let got = |text: &str| errors(text).into_iter().map(|e| (e.line, e.field, e.message)).collect::<Vec<_>>();
    let e = got("[budget]\nclusters = [\"a\"]\n[budget.x]\nshare = 1\naccounts = [\"x\"]\n");
    assert_eq!((e[0].0, e[0].1.as_str()), (Some(2), "budget.clusters"));
    assert!(e[0].2.contains("the root is the whole lab"), "{e:?}");
    let e = got("[budget]\n[budget.x]\nshare = 1\nclusters = [\"alpha\"]\n[budget.x.y]\nshare = 1\naccounts = [\"y\"]\nclusters = [\"alpha\", \"beta\"]\n");
    assert_eq!((e[0].0, e[0].1.as_str()), (Some(8), "budget.x.y.clusters"));
    assert!(e[0].2.contains("funded on beta where x (line 2) is not"), "{e:?}");
    let e = got("[budget]\n[budget.x]\nshare = 1\naccounts = [\"x\"]\nclusters = [\"alpha\"]\ncluster_shares = { beta = 2, alpha = -1 }\n");
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(e.iter().any(|(l, f, m)| *l == Some(6) && f == "budget.x.cluster_shares.beta" && m.contains("where the node is not funded")), "{e:?}");
    assert!(e.iter().any(|(_, f, m)| f == "budget.x.cluster_shares.alpha" && m.contains("positive number")), "{e:?}");
    let e = got("[budget]\n[budget.x]\nshare = 1\naccounts = [\"x\"]\nclusters = []\n");
    assert!(e[0].2.contains("funds the node on no cluster"), "{e:?}");
    // Each cluster's shares keep the least effective share.
    let e = got("[budget]\n[budget.x]\nshare = 1\naccounts = [\"x\"]\ncluster_shares = { beta = 1e-15 }\n[budget.y]\nshare = 1\naccounts = [\"y\"]\n");
    assert_eq!((e.len(), e[0].1.as_str()), (1, "budget.x.cluster_shares"), "{e:?}");
    assert!(e[0].2.contains("on cluster beta") && e[0].2.contains("below the least allowed"), "{e:?}");
    let e = got("[budget]\n[budget.x]\nshare = 1\naccounts = [\"x\"]\ncluster_shares = 3\n");
    assert!(e[0].2.contains("cluster_shares = { beta = 3 }"), "{e:?}");
}

fn errors(text: &str) -> Vec<BudgetError> {
    match BudgetTree::parse(text) {
        Ok(_) => panic!("accepted a bad budget:\n{text}"),
        Err(e) => e.0,
    }
}

#[test]
fn bad_files_name_line_and_field() {
    let e = errors("[budget]\n[budget.a]\nshare = 0\naccounts = [\"a\"]\n");
    assert_eq!(e[0].line, Some(3));
    assert_eq!(e[0].field, "budget.a.share");
    assert!(e[0].message.contains("positive"));

    let e = errors("[budget]\n[budget.a]\nshare = nan\naccounts = [\"a\"]\n");
    assert!(e[0].message.contains("positive"), "{:?}", e);

    let e = errors("[budget]\n[budget.a]\nshares = 2\naccounts = [\"a\"]\n");
    assert!(e.iter().any(|e| e.line == Some(3) && e.message.contains("did you mean 'share'")), "{e:?}");

    let e = errors("[cluster]\nlookbak = \"7d\"\n[budget]\n[budget.a]\nshare = 1\naccounts = [\"a\"]\n");
    assert!(e[0].message.contains("did you mean 'lookback'"), "{e:?}");
    assert_eq!(e[0].line, Some(2));

    let e = errors("[cluster]\nmin_runtime_cap = \"8 hours\"\n[budget]\n[budget.a]\nshare = 1\naccounts = [\"a\"]\n");
    assert_eq!(e[0].field, "cluster.min_runtime_cap");
    assert_eq!(e[0].line, Some(2));

    let e = errors("[budget]\nowners = [\"x\"]\n");
    assert!(e[0].message.contains("empty"), "{e:?}");

    let e = errors("[cluster]\ngpus = 8\n");
    assert!(e[0].message.contains("missing [budget]"), "{e:?}");

    let e = errors("[budget]\n[budget.a]\nshare = 1\naccounts = [\"x\"]\n[budget.b]\nshare = 1\naccounts = [\"X\"]\n");
    assert!(e[0].message.contains("already charged to a (line 2)"), "{e:?}");
    assert_eq!(e[0].line, Some(5));

    let e = errors("[budget]\n[budget.a]\nshare = 1\n");
    assert!(e[0].message.contains("a leaf needs accounts"), "{e:?}");

    // TOML itself refuses duplicate tables, with the line.
    let e = errors("[budget]\n[budget.a]\nshare = 1\naccounts = [\"a\"]\n[budget.a]\nshare = 2\n");
    assert!(e[0].message.contains("invalid TOML"), "{e:?}");
    assert_eq!(e[0].line, Some(5));
}

#[test]
fn ambiguous_member_needs_a_default() {
    let text = LAB.replace("dave = \"vision/tracking\"", "");
    let e = errors(&text);
    assert!(e[0].message.contains("user 'dave' is a member of vision/tracking"), "{e:?}");
    assert!(e[0].message.contains("[default_leaf]"), "{e:?}");
}

#[test]
fn every_error_is_reported_at_once() {
    let e = errors("[budget]\n[budget.a]\nshare = -1\naccounts = [\"a\"]\n[budget.b]\nshare = 1\n[budget.c]\nshare = 1\naccounts = [\"c\"]\nfoo = 3\n");
    assert_eq!(e.len(), 3, "{e:?}");
    assert_eq!(e.iter().map(|e| e.line.unwrap()).collect::<Vec<_>>(), vec![3, 5, 10]);
}

#[test]
fn settings_rules_name_line_and_field() {
    let budget = "[budget]\n[budget.a]\nshare = 1\naccounts = [\"a\"]\n";
    let e = errors(&format!("[cluster]\nlookback = \"0s\"\ngrace = \"1m\"\ndefault_min_runtime = \"9h\"\npreempt_margin = -0.5\n{budget}"));
    let got: Vec<(Option<usize>, &str, &str)> = e.iter().map(|e| (e.line, e.field.as_str(), e.message.as_str())).collect();
    assert_eq!(
        got,
        vec![
            (Some(2), "cluster.lookback", "the lookback window must be longer than zero"),
            (Some(4), "cluster.default_min_runtime", "9h exceeds min_runtime_cap of 8h"),
            (Some(5), "cluster.preempt_margin", "must be a number of at least 0, such as 0.1"),
        ]
    );
    let e = errors(&format!("[cluster]\npreempt_margin = \"much\"\n{budget}"));
    assert_eq!((e.len(), e[0].line, e[0].message.as_str()), (1, Some(2), "must be a number of at least 0, such as 0.1"));
    // A default that is not given follows a lower cap.
    let t = BudgetTree::parse(&format!("[cluster]\nmin_runtime_cap = \"30m\"\n{budget}")).unwrap();
    assert_eq!(t.settings.default_min_runtime, 1800);
    // The preemption switches: on unless the budget says, and only booleans.
    assert!(t.settings.preempt_within_team && t.settings.preempt_smallest_first);
    let t = BudgetTree::parse(&format!("[cluster]\npreempt_within_team = false\npreempt_smallest_first = false\n{budget}")).unwrap();
    assert!(!t.settings.preempt_within_team && !t.settings.preempt_smallest_first);
    let e = errors(&format!("[cluster]\npreempt_within_team = \"yes\"\n{budget}"));
    let got: Vec<(Option<usize>, &str, &str)> = e.iter().map(|e| (e.line, e.field.as_str(), e.message.as_str())).collect();
    assert_eq!(got, vec![(Some(2), "cluster.preempt_within_team", "must be true or false")]);
    assert_eq!(BudgetTree::parse(&format!("[cluster]\nunallocated_grace = \"30s\"\n{budget}")).unwrap().settings.unallocated_grace, 30);
    // Whose usage fair-share counts: each cluster's own unless the budget says the lab's.
    assert_eq!(BudgetTree::parse(budget).unwrap().settings.fair_share_usage, FairShareUsage::Cluster);
    assert_eq!(BudgetTree::parse(&format!("[cluster]\nfair_share_usage = \"lab\"\n{budget}")).unwrap().settings.fair_share_usage, FairShareUsage::Lab);
    let e = errors(&format!("[cluster]\nfair_share_usage = \"site\"\n{budget}"));
    assert_eq!((e.len(), e[0].line, e[0].field.as_str()), (1, Some(2), "cluster.fair_share_usage"));
    assert!(e[0].message.contains("\"cluster\"") && e[0].message.contains("\"lab\""), "{e:?}");
    let lab = BudgetTree::parse(&format!("[cluster]\nfair_share_usage = \"lab\"\n{budget}")).unwrap();
    assert!(lab.diff(&BudgetTree::parse(budget).unwrap()).iter().any(|c| matches!(c, BudgetChange::Setting { name: "fair_share_usage", .. })));
    assert_eq!(errors(&format!("[cluster]\nunallocated_grace = \"-1m\"\n{budget}"))[0].field, "cluster.unallocated_grace");
    let t = BudgetTree::parse(&format!("[cluster]\nsmall_job_gpus = 2\nsmall_job_min_runtime = \"15m\"\n{budget}")).unwrap();
    assert_eq!((t.settings.small_job_gpus, t.settings.small_job_min_runtime), (2, 900));
    let e = errors(&format!("[cluster]\nsmall_job_gpus = -1\nsmall_job_min_runtime = \"-5m\"\n{budget}"));
    let got: Vec<(Option<usize>, &str)> = e.iter().map(|e| (e.line, e.field.as_str())).collect();
    assert_eq!(got, vec![(Some(2), "cluster.small_job_gpus"), (Some(3), "cluster.small_job_min_runtime")]);
    assert!(e[0].message.contains("whole number of GPUs"), "{}", e[0].message);
}

#[test]
fn validate_holds_every_rule() {
    assert_eq!(ClusterSettings::default().validate(), Ok(()));
    let bad = ClusterSettings {
        gpus: Some(0),
        lookback: 0,
        min_runtime_cap: 3600,
        default_min_runtime: 7200,
        grace: -1,
        preempt_margin: f64::NAN,
        ..ClusterSettings::default()
    };
    let broken = bad.validate().unwrap_err();
    let fields: Vec<&str> = broken.iter().map(SettingsError::field).collect();
    assert_eq!(fields, vec!["gpus", "lookback", "grace", "default_min_runtime", "preempt_margin"]);
    let above = &broken[3];
    assert_eq!(above.fields(), &["default_min_runtime", "min_runtime_cap"]);
    assert_eq!(above.to_string(), "2h exceeds min_runtime_cap of 1h");
}

#[test]
fn diff_and_permissions() {
    let old = lab();
    // carol owns vision/tracking: may change its members, not its share.
    let members = BudgetTree::parse(&LAB.replace("members = [\"dave\"]", "members = [\"dave\", \"gus\"]")).unwrap();
    assert!(members.authorize(&old, "carol").is_ok());
    let share = BudgetTree::parse(&LAB.replacen("share = 1\nowners = [\"carol\"]", "share = 5\nowners = [\"carol\"]", 1)).unwrap();
    assert_eq!(share.diff(&old).len(), 1);
    let refused = share.authorize(&old, "carol").unwrap_err();
    assert_eq!(refused.len(), 1);
    assert!(refused[0].to_string().contains("needs an owner of vision: alice, director or an admin"), "{}", refused[0]);
    assert!(share.authorize(&old, "alice").is_ok());
    assert!(share.authorize(&old, "director").is_ok());
    let settings = BudgetTree::parse(&LAB.replace("gpus = 32", "gpus = 64")).unwrap();
    assert!(settings.authorize(&old, "alice").is_err());
    assert!(settings.authorize(&old, "director").is_ok());
}

#[test]
fn edits_of_accounts_and_leaves_move_charges_never_drop_them() {
    let v1 = BudgetTree::parse("[budget]\n[budget.vision]\nshare = 1\n[budget.vision.tracking]\nshare = 1\naccounts = [\"tracking\"]\n[budget.vision.detect3d]\nshare = 1\naccounts = [\"detect3d\"]\n[budget.nlp]\nshare = 1\naccounts = [\"nlp\"]\n").unwrap();
    // The tracking leaf renames its account; detect3d is removed and
    // added again as detect3d-v2 with the same account.
    let v2 = BudgetTree::parse("[budget]\n[budget.vision]\nshare = 1\n[budget.vision.tracking]\nshare = 1\naccounts = [\"tracking2\"]\n[budget.vision.detect3d-v2]\nshare = 1\naccounts = [\"detect3d\"]\n[budget.nlp]\nshare = 1\naccounts = [\"nlp\"]\n").unwrap();
    let leaf = |t: &BudgetTree, path: &str| t.node(t.find(path).unwrap()).leaf.unwrap();
    let tracking = leaf(&v2, "vision/tracking");
    // Without history the old account is outside the tree...
    assert_eq!(v2.charged_leaf_of_account("tracking"), None);
    // ...with it, the jobs queued under it are still charged to tracking,
    // while a new submission with it is refused (it is no budget's now).
    // The history of the sync says where each account is charged now.
    let said: Vec<String> = v2.diff(&v1).iter().map(|c| c.to_string()).collect();
    assert!(said.contains(&"= account tracking: jobs and runs under it stay charged to vision/tracking through the lookback window".to_owned()), "{said:?}");
    assert!(said.contains(&"= account detect3d: the usage of vision/detect3d in the window moves with it to vision/detect3d-v2".to_owned()), "{said:?}");
    let v2 = v2.with_account_history([&v1]);
    assert_eq!(v2.charged_leaf_of_account("Tracking "), Some(tracking));
    assert_eq!(v2.charged_leaf_of_account("tracking2"), Some(tracking));
    assert!(v2.leaf_for_job("alice", Some("tracking")).is_err());
    assert_eq!(v2.retired_accounts(), vec![("tracking".to_owned(), "vision/tracking".to_owned())]);
    // A run recorded under the removed detect3d follows its account to detect3d-v2;
    // one recorded under a leaf that is still there stays there.
    assert_eq!(v2.charged_leaf_of_run(Some("vision/detect3d"), Some("detect3d")), Some(leaf(&v2, "vision/detect3d-v2")));
    assert_eq!(v2.charged_leaf_of_run(Some("nlp"), Some("detect3d")), Some(leaf(&v2, "nlp")));
    assert_eq!(v2.charged_leaf_of_run(Some("vision/gone"), Some("nosuch")), None);
    // The account given back: the current mapping wins, nothing retired.
    let v3 = BudgetTree::parse("[budget]\n[budget.vision]\nshare = 1\n[budget.vision.tracking]\nshare = 1\naccounts = [\"tracking\"]\n[budget.nlp]\nshare = 1\naccounts = [\"nlp\", \"tracking2\"]\n").unwrap().with_account_history([&v2, &v1]);
    assert_eq!(v3.charged_leaf_of_account("tracking"), Some(leaf(&v3, "vision/tracking")));
    assert_eq!(v3.charged_leaf_of_account("tracking2"), Some(leaf(&v3, "nlp")));
    // An account whose last leaf is gone is charged nowhere, and the sync says so.
    assert_eq!(v3.charged_leaf_of_account("detect3d"), None);
    let said: Vec<String> = v3.diff(&v2).iter().map(|c| c.to_string()).collect();
    assert!(
        said.contains(&"= account detect3d: no leaf has it now and vision/detect3d-v2 is gone: its usage in the window counts in vision's".to_owned()),
        "{said:?}"
    );
    assert_eq!(v3.charged_node_of_run(Some("vision/detect3d-v2"), Some("detect3d")), v3.find("vision"));
}
