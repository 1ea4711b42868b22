//! Reading a budget file: the TOML parser, its field lists and name rules.
//! Every problem is collected with its line and field; nothing is built
//! unless the whole file is valid.

use super::*;

const NODE_FIELDS: [&str; 7] = ["share", "owners", "accounts", "members", "description", "clusters", "cluster_shares"];
/// The `[cluster]` keys: the cluster's own, then the policy's
/// ([`crate::settings::POLICY_SETTINGS`]), in the order errors list them.
fn cluster_fields() -> Vec<&'static str> {
    let mut keys = vec!["charge", "gpus"];
    keys.extend(POLICY_SETTINGS.iter().map(|s| s.key));
    keys.push("fair_share_usage");
    keys
}
const TOP_LEVEL: [&str; 3] = ["cluster", "default_leaf", "budget"];

/// Maps byte offsets to 1-based line numbers.
struct Lines(Vec<usize>);

impl Lines {
    fn new(text: &str) -> Self {
        Lines(std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1)).collect())
    }
    fn of(&self, span: Option<Range<usize>>) -> Option<usize> {
        span.map(|r| self.0.partition_point(|&start| start <= r.start))
    }
}

/// " (did you mean 'share'?)" when a known word is within two edits.
fn suggestion(word: &str, known: &[&str]) -> String {
    known.iter().map(|k| (strsim::levenshtein(word, k), k)).filter(|(d, _)| *d <= 2).min().map(|(_, k)| format!(" (did you mean '{k}'?)")).unwrap_or_default()
}

fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_NAME_CHARS && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn valid_user(name: &str) -> bool {
    !name.is_empty() && !name.chars().any(|c| c.is_whitespace() || c.is_control() || c == '/' || c == ':' || c == ',')
}

/// Longest account or user name the budget takes: Slurm's own names are far
/// shorter, and a longer one would only break the tables that show it.
pub const MAX_NAME_CHARS: usize = 255;

/// Why `name` cannot be a Slurm account or user name in a budget's
/// `accounts`, `owners` or `users` list, or `None` if it can. The one rule
/// for budgets and the simulator's workload files (a workload's team is the
/// account its budget leaf charges).
pub fn account_name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        Some("a name is empty".to_owned())
    } else if name.chars().count() > MAX_NAME_CHARS {
        Some(format!("a name of {} characters is longer than the {MAX_NAME_CHARS} a Slurm account or user name may have", name.chars().count()))
    } else if !valid_user(name) {
        Some(format!("'{}' is not a valid name (no spaces, line breaks, '/', ':' or ',')", name.escape_debug()))
    } else {
        None
    }
}

struct Parser<'a> {
    lines: Lines,
    errors: Vec<BudgetError>,
    nodes: Vec<BudgetNode>,
    /// Per node, the line of its `share` (for the rules on shares together).
    share_lines: Vec<Option<usize>>,
    _text: &'a str,
}

impl Parser<'_> {
    fn error(&mut self, span: Option<Range<usize>>, field: impl Into<String>, message: impl Into<String>) {
        let line = self.lines.of(span);
        self.errors.push(BudgetError { line, field: field.into(), message: message.into() });
    }

    /// Span of `key` inside `table`, falling back to the value's span.
    fn key_span(table: &Table, key: &str) -> Option<Range<usize>> {
        table.key(key).and_then(|k| k.span()).or_else(|| table.get(key).and_then(Item::span))
    }

    fn string_list(&mut self, table: &Table, key: &str, field: &str) -> Vec<String> {
        let span = Self::key_span(table, key);
        let Some(item) = table.get(key) else { return Vec::new() };
        let Some(array) = item.as_array() else {
            self.error(span, field, format!("must be a list of strings, like {key} = [\"alice\"]"));
            return Vec::new();
        };
        let mut out = Vec::new();
        for value in array.iter() {
            match value.as_str() {
                Some(s) => match account_name_problem(s) {
                    None => out.push(s.to_owned()),
                    Some(problem) => self.error(value.span().or(span.clone()), field, problem),
                },
                None => self.error(value.span().or(span.clone()), field, "every entry must be a quoted string"),
            }
        }
        out
    }

    /// A node's `clusters` and `cluster_shares`: valid cluster names (Slurm
    /// lower-cases ClusterName), positive shares, only on clusters the node
    /// is funded on, and funded only where its nearest ancestor that names
    /// its clusters is.
    fn cluster_funding(&mut self, table: &Table, field: &str, parent: Option<NodeId>) -> (Option<Vec<String>>, BTreeMap<String, f64>) {
        let mut shares = BTreeMap::new();
        if parent.is_none() {
            for key in ["clusters", "cluster_shares"] {
                if table.contains_key(key) {
                    self.error(
                        Self::key_span(table, key),
                        format!("{field}.{key}"),
                        "the root is the whole lab, on every cluster: fund its children per cluster instead",
                    );
                }
            }
            return (None, shares);
        }
        let inherited = std::iter::successors(parent, |&p| self.nodes[p as usize].parent).find_map(|p| self.nodes[p as usize].clusters.clone().map(|c| (p, c)));
        let clusters = table.contains_key("clusters").then(|| {
            let span = Self::key_span(table, "clusters");
            let list: Vec<String> = self.string_list(table, "clusters", &format!("{field}.clusters")).into_iter().map(|c| c.to_lowercase()).collect();
            if list.is_empty() && table.get("clusters").and_then(Item::as_array).is_some() {
                self.error(span.clone(), format!("{field}.clusters"), "an empty list funds the node on no cluster: remove the node, or name its clusters");
            }
            if let Some((p, theirs)) = &inherited {
                let outside: Vec<&String> = list.iter().filter(|c| !theirs.contains(c)).collect();
                if !outside.is_empty() {
                    let p = &self.nodes[*p as usize];
                    let message = format!(
                        "funded on {} where {} (line {}) is not: it has clusters = [{}]",
                        outside.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(", "),
                        p.path,
                        p.line,
                        theirs.join(", ")
                    );
                    self.error(span, format!("{field}.clusters"), message);
                }
            }
            list
        });
        let funded_on = clusters.clone().or(inherited.map(|(_, c)| c));
        if let Some(item) = table.get("cluster_shares") {
            let span = Self::key_span(table, "cluster_shares");
            let Some(entries) = item.as_table_like() else {
                self.error(span, format!("{field}.cluster_shares"), "must be a table of cluster = share, like cluster_shares = { beta = 3 }");
                return (clusters, shares);
            };
            for (cluster, value) in entries.iter() {
                let f = format!("{field}.cluster_shares.{cluster}");
                let share = value.as_value().and_then(|v| v.as_float().or_else(|| v.as_integer().map(|i| i as f64)));
                match share {
                    _ if !valid_user(cluster) => self.error(span.clone(), f, format!("'{cluster}' is not a cluster name")),
                    Some(s) if s.is_finite() && s > 0.0 => match &funded_on {
                        Some(on) if !on.iter().any(|c| c.eq_ignore_ascii_case(cluster)) => {
                            self.error(span.clone(), f, format!("a share on {cluster}, where the node is not funded (its clusters: {})", on.join(", ")))
                        }
                        _ => {
                            shares.insert(cluster.to_lowercase(), s);
                        }
                    },
                    _ => self.error(
                        span.clone(),
                        f,
                        "must be a positive number, such as 3 or 0.5 (to fund the node on some clusters only, list them in clusters = [...])",
                    ),
                }
            }
        }
        (clusters, shares)
    }

    fn duration(&mut self, table: &Table, key: &str, default: Seconds) -> Seconds {
        let field = format!("cluster.{key}");
        let span = Self::key_span(table, key);
        match table.get(key).map(|i| i.as_value()) {
            None => default,
            Some(Some(Value::String(s))) => match parse_duration(s.value()) {
                Ok(secs) => secs,
                Err(e) => {
                    self.error(span, field, e.to_string());
                    default
                }
            },
            Some(_) => {
                self.error(span, field, "must be a quoted duration such as \"8h\", \"7d\" or \"1h30m\"");
                default
            }
        }
    }

    fn flag(&mut self, table: &Table, key: &str, default: bool) -> bool {
        match table.get(key).map(|i| i.as_value().and_then(Value::as_bool)) {
            None => default,
            Some(Some(b)) => b,
            Some(None) => {
                self.error(Self::key_span(table, key), format!("cluster.{key}"), "must be true or false");
                default
            }
        }
    }

    fn settings(&mut self, table: &Table) -> ClusterSettings {
        let defaults = ClusterSettings::default();
        let cluster_fields = cluster_fields();
        for (key, _) in table.iter() {
            if !cluster_fields.contains(&key) {
                let span = Self::key_span(table, key);
                self.error(
                    span,
                    format!("cluster.{key}"),
                    format!("unknown setting{}; [cluster] takes {}", suggestion(key, &cluster_fields), cluster_fields.join(", ")),
                );
            }
        }
        let charge = match table.get("charge").map(|i| i.as_str()) {
            None => Charged::Gpus,
            Some(Some("gpus")) => Charged::Gpus,
            Some(Some("cpus")) => Charged::Cpus,
            Some(_) => {
                self.error(
                    Self::key_span(table, "charge"),
                    "cluster.charge",
                    "must be \"gpus\" (the default) or \"cpus\" (a cluster without GPUs: CPUs are charged and shared)",
                );
                Charged::Gpus
            }
        };
        let gpus = match table.get("gpus").map(|i| i.as_integer()) {
            None => None,
            Some(Some(n)) if n > 0 && n <= u32::MAX as i64 => Some(n as u32),
            Some(_) => {
                self.error(Self::key_span(table, "gpus"), "cluster.gpus", "must be a positive whole number of GPUs");
                None
            }
        };
        // The policy's settings, each by its kind; a value that cannot be
        // read is an error, with the default in its place.
        let mut policy = defaults.clone();
        for setting in &POLICY_SETTINGS {
            let default = setting.value(&policy);
            let value = match default {
                SettingValue::Duration(d) => SettingValue::Duration(self.duration(table, setting.key, d)),
                SettingValue::Flag(b) => SettingValue::Flag(self.flag(table, setting.key, b)),
                SettingValue::Fraction(x) => {
                    let number = |v: &Value| v.as_float().or_else(|| v.as_integer().map(|i| i as f64));
                    match table.get(setting.key).map(|i| i.as_value().and_then(number)) {
                        None => default,
                        Some(Some(m)) => SettingValue::Fraction(m),
                        Some(None) => {
                            self.error(Self::key_span(table, setting.key), format!("cluster.{}", setting.key), setting.must);
                            SettingValue::Fraction(x)
                        }
                    }
                }
                SettingValue::Count(_) => match table.get(setting.key).map(|i| i.as_integer()) {
                    None => default,
                    Some(Some(n)) if (0..=u32::MAX as i64).contains(&n) => SettingValue::Count(n as u32),
                    Some(_) => {
                        self.error(Self::key_span(table, setting.key), format!("cluster.{}", setting.key), setting.must);
                        default
                    }
                },
            };
            (setting.set)(&mut policy, value);
            if setting.key == "min_runtime_cap" {
                // A default minimum runtime not given (or unreadable) follows a
                // lower cap; the cap comes before it in the table.
                policy.default_min_runtime = ClusterSettings::default_min_runtime_for_cap(policy.min_runtime_cap);
            }
        }
        let fair_share_usage = match table.get("fair_share_usage").map(|i| i.as_str()) {
            None => defaults.fair_share_usage,
            Some(Some("cluster")) => FairShareUsage::Cluster,
            Some(Some("lab")) => FairShareUsage::Lab,
            Some(_) => {
                self.error(
                    Self::key_span(table, "fair_share_usage"),
                    "cluster.fair_share_usage",
                    "must be \"cluster\" (the default: fair-share counts each cluster's own usage) or \"lab\" (every cluster's that shares the ledger)",
                );
                defaults.fair_share_usage
            }
        };
        let settings = ClusterSettings { charge, gpus, fair_share_usage, ..policy };
        // The rules on the values themselves (a value that could not be read
        // has its error already, and the default in its place).
        if let Err(broken) = settings.validate() {
            for e in broken {
                let field = e.field();
                self.error(Self::key_span(table, field), format!("cluster.{field}"), e.to_string());
            }
        }
        settings
    }

    /// Reads one node and, recursively, its children. Returns its id.
    fn node(&mut self, table: &Table, name: &str, path: String, parent: Option<NodeId>, depth: u32, span: Option<Range<usize>>) -> NodeId {
        let field = if path.is_empty() { "budget".to_owned() } else { format!("budget.{}", path.replace('/', ".")) };
        let id = self.nodes.len() as NodeId;
        let line = self.lines.of(table.span().or(span.clone())).unwrap_or(0);
        self.nodes.push(BudgetNode {
            name: name.to_owned(),
            path: path.clone(),
            parent,
            children: Vec::new(),
            depth,
            share: 1.0,
            effective_share: 0.0,
            owners: Vec::new(),
            accounts: Vec::new(),
            members: Vec::new(),
            description: None,
            clusters: None,
            cluster_shares: BTreeMap::new(),
            leaf: None,
            line,
        });

        // Share: required on every node but the root.
        let share_span = Self::key_span(table, "share");
        self.share_lines.push(self.lines.of(share_span.clone()));
        match (parent, table.get("share")) {
            (None, Some(_)) => self.error(share_span, format!("{field}.share"), "the root is the whole cluster and takes no share"),
            (Some(_), None) => self.error(
                table.span().or(span.clone()),
                format!("{field}.share"),
                "missing share: every node needs a positive share, its weight among its siblings",
            ),
            (Some(_), Some(item)) => {
                let value = item.as_value().and_then(|v| v.as_float().or_else(|| v.as_integer().map(|i| i as f64)));
                match value {
                    Some(s) if s.is_finite() && s > 0.0 => self.nodes[id as usize].share = s,
                    Some(s) => self.error(share_span, format!("{field}.share"), format!("share must be a positive number, got {s}")),
                    None => self.error(share_span, format!("{field}.share"), "share must be a positive number, such as 30 or 0.5"),
                }
            }
            (None, None) => {}
        }

        let owners = self.string_list(table, "owners", &format!("{field}.owners"));
        let accounts: Vec<String> = self.string_list(table, "accounts", &format!("{field}.accounts")).into_iter().map(|a| a.to_lowercase()).collect();
        let members = self.string_list(table, "members", &format!("{field}.members"));
        let description = match table.get("description") {
            None => None,
            Some(item) => match item.as_str() {
                Some(s) => Some(s.to_owned()),
                None => {
                    self.error(Self::key_span(table, "description"), format!("{field}.description"), "must be a quoted string");
                    None
                }
            },
        };

        // Per-cluster funding, before the children, which are checked against it.
        let (clusters, cluster_shares) = self.cluster_funding(table, &field, parent);
        self.nodes[id as usize].clusters = clusters;
        self.nodes[id as usize].cluster_shares = cluster_shares;

        let mut children = Vec::new();
        for (key, item) in table.iter() {
            if NODE_FIELDS.contains(&key) {
                continue;
            }
            let key_span = Self::key_span(table, key);
            let child_table = match item {
                Item::Table(t) => Some(t),
                _ => None,
            };
            match child_table {
                Some(t) if valid_name(key) => {
                    let child_path = if path.is_empty() { key.to_owned() } else { format!("{path}/{key}") };
                    let child = self.node(t, key, child_path, Some(id), depth + 1, key_span);
                    children.push(child);
                }
                Some(_) if key.len() > MAX_NAME_CHARS => self.error(
                    key_span,
                    format!("{field}.{}...", key.chars().take(16).collect::<String>()),
                    format!("a node name of {} characters is longer than the {MAX_NAME_CHARS} allowed", key.len()),
                ),
                Some(_) => self.error(key_span, format!("{field}.{key}"), "node names may use only letters, digits, '_' and '-'"),
                None if item.is_inline_table() => {
                    self.error(key_span, format!("{field}.{key}"), format!("write child nodes as their own table, [{field}.{key}], not inline"))
                }
                None => self.error(
                    key_span,
                    format!("{field}.{key}"),
                    format!(
                        "unknown field{}; a node takes {} (a child node is a table, [{field}.{key}])",
                        suggestion(key, &NODE_FIELDS),
                        NODE_FIELDS.join(", ")
                    ),
                ),
            }
        }

        let is_leaf = children.is_empty() && parent.is_some();
        if is_leaf && accounts.is_empty() {
            self.error(table.span().or(span.clone()), format!("{field}.accounts"), "a leaf needs accounts = [\"...\"]: the Slurm accounts its jobs charge");
        }
        if !is_leaf && !accounts.is_empty() {
            self.error(
                Self::key_span(table, "accounts"),
                format!("{field}.accounts"),
                "only leaves (nodes without children) are charged; move the accounts to a leaf below",
            );
        }
        if !is_leaf && !members.is_empty() {
            self.error(
                Self::key_span(table, "members"),
                format!("{field}.members"),
                "only leaves (nodes without children) have members; move them to a leaf below",
            );
        }
        let node = &mut self.nodes[id as usize];
        node.owners = owners;
        node.accounts = accounts;
        node.members = members;
        node.description = description;
        node.children = children;
        id
    }
}

impl BudgetTree {
    /// Parses and validates a budget file. On any problem, returns all of them.
    pub fn parse(text: &str) -> Result<BudgetTree, BudgetErrors> {
        let mut p = Parser { lines: Lines::new(text), errors: Vec::new(), nodes: Vec::new(), share_lines: Vec::new(), _text: text };
        let doc = match ImDocument::parse(text) {
            Ok(doc) => doc,
            Err(e) => {
                let line = p.lines.of(e.span());
                let message = e.message().trim().to_owned();
                return Err(BudgetErrors(vec![BudgetError { line, field: String::new(), message: format!("invalid TOML: {message}") }]));
            }
        };
        let top = doc.as_table();
        for (key, _) in top.iter() {
            if !TOP_LEVEL.contains(&key) {
                let span = Parser::key_span(top, key);
                p.error(span, key, format!("unknown section{}; a budget file has [cluster], [default_leaf] and [budget]", suggestion(key, &TOP_LEVEL)));
            }
        }
        let settings = match top.get("cluster") {
            None => ClusterSettings::default(),
            Some(Item::Table(t)) => p.settings(t),
            Some(item) => {
                p.error(item.span(), "cluster", "must be a table, [cluster]");
                ClusterSettings::default()
            }
        };
        match top.get("budget") {
            Some(Item::Table(t)) => {
                p.node(t, "", String::new(), None, 0, t.span());
                if p.nodes[0].children.is_empty() {
                    p.error(t.span(), "budget", "the budget tree is empty: add at least one node, such as [budget.myteam]");
                }
            }
            Some(item) => p.error(item.span(), "budget", "must be a table, [budget]"),
            None => p.error(None, "budget", "missing [budget]: the budget tree starts there"),
        }
        if p.nodes.is_empty() {
            return Err(BudgetErrors(p.errors));
        }

        let mut tree = BudgetTree {
            settings,
            nodes: std::mem::take(&mut p.nodes),
            leaves: Vec::new(),
            by_path: HashMap::new(),
            by_account: HashMap::new(),
            retired_accounts: HashMap::new(),
            default_leaf: BTreeMap::new(),
            member_of: HashMap::new(),
            open_leaves: Vec::new(),
        };
        tree.index(&mut p, top);
        // Each cluster's own shares keep the least effective share too.
        if p.errors.is_empty() {
            for cluster in tree.named_clusters() {
                let view = tree.for_cluster(Some(&cluster));
                for (id, node) in view.nodes.iter().enumerate().skip(1) {
                    if node.share > 0.0 && node.effective_share < MIN_EFFECTIVE_SHARE {
                        p.errors.push(BudgetError {
                            line: p.share_lines.get(id).copied().flatten().or(Some(node.line)),
                            field: format!("budget.{}.cluster_shares", node.path.replace('/', ".")),
                            message: format!(
                                "on cluster {cluster}, the node's effective share is {}, below the least allowed, 1e-12: give it and its siblings shares of more similar sizes there",
                                rounded(node.effective_share)
                            ),
                        });
                    }
                }
            }
        }
        if p.errors.is_empty() {
            Ok(tree)
        } else {
            p.errors.sort_by_key(|e| e.line.unwrap_or(0));
            Err(BudgetErrors(p.errors))
        }
    }

    /// Builds the lookup tables and effective shares; records conflicts in `p`.
    fn index(&mut self, p: &mut Parser<'_>, top: &Table) {
        self.compute_effective_shares();
        // The least effective share, at the topmost node below it (its
        // descendants are below it too).
        for id in 1..self.nodes.len() {
            let node = &self.nodes[id];
            let parent = &self.nodes[node.parent.unwrap_or(0) as usize];
            if node.effective_share >= MIN_EFFECTIVE_SHARE || parent.effective_share < MIN_EFFECTIVE_SHARE {
                continue;
            }
            let largest_id =
                parent.children.iter().copied().max_by(|&a, &b| self.nodes[a as usize].share.total_cmp(&self.nodes[b as usize].share)).unwrap_or(id as NodeId)
                    as usize;
            let largest = &self.nodes[largest_id];
            let why = if node.effective_share / parent.effective_share < MIN_EFFECTIVE_SHARE {
                // Scaled by the largest, as the effective shares are: the sum may exceed f64.
                let scaled: f64 = parent.children.iter().map(|&c| self.nodes[c as usize].share / largest.share).sum();
                let total = scaled * largest.share;
                format!(
                    "its share {} is {} of the sum of its and its siblings' shares, {} (the largest: {}'s {}, line {}); give siblings shares of more similar sizes",
                    compact(node.share),
                    rounded(node.share / largest.share / scaled),
                    if total.is_finite() { rounded(total) } else { "above 1.7e308".to_owned() },
                    largest.name,
                    compact(largest.share),
                    p.share_lines.get(largest_id).copied().flatten().unwrap_or(largest.line)
                )
            } else {
                format!(
                    "the product of its and its ancestors' fractions of their siblings' shares, down {}; fewer levels, or shares of more similar sizes",
                    node.path
                )
            };
            p.errors.push(BudgetError {
                line: p.share_lines.get(id).copied().flatten().or(Some(node.line)),
                field: format!("budget.{}.share", node.path.replace('/', ".")),
                message: format!("the node's effective share of the cluster is {}, below the least allowed, 1e-12: {why}", rounded(node.effective_share)),
            });
        }
        let mut account_line: HashMap<String, (usize, String)> = HashMap::new();
        for id in 0..self.nodes.len() {
            self.by_path.insert(self.nodes[id].path.clone(), id as NodeId);
            if !self.nodes[id].is_leaf() {
                continue;
            }
            let leaf = self.leaves.len() as LeafId;
            self.leaves.push(id as NodeId);
            self.nodes[id].leaf = Some(leaf);
            let node = &self.nodes[id];
            for account in &node.accounts {
                if let Some((line, other)) = account_line.get(account) {
                    p.errors.push(BudgetError {
                        line: Some(node.line),
                        field: format!("budget.{}.accounts", node.path.replace('/', ".")),
                        message: format!("account '{account}' is already charged to {other} (line {line}); an account belongs to one leaf"),
                    });
                } else {
                    account_line.insert(account.clone(), (node.line, node.path.clone()));
                    self.by_account.insert(account.clone(), leaf);
                }
            }
            let mut seen = BTreeSet::new();
            for member in &node.members {
                if !seen.insert(member.as_str()) {
                    continue;
                }
                if member == "*" {
                    self.open_leaves.push(leaf);
                } else {
                    self.member_of.entry(member.clone()).or_default().push(leaf);
                }
            }
        }

        // [default_leaf]
        match top.get("default_leaf") {
            None => {}
            Some(Item::Table(t)) => {
                for (user, item) in t.iter() {
                    let span = Parser::key_span(t, user);
                    let field = format!("default_leaf.{user}");
                    let Some(path) = item.as_str() else {
                        p.error(span, field, "must be the quoted path of a leaf, such as \"vision/detection\"");
                        continue;
                    };
                    let path = path.replace('.', "/");
                    match self.by_path.get(&path).and_then(|&n| self.nodes[n as usize].leaf) {
                        None => p.error(span, field, format!("'{path}' is not a leaf of the budget tree")),
                        Some(leaf) if !self.may_charge(user, leaf) => p.error(span, field, format!("'{user}' is not a member of '{path}'")),
                        Some(leaf) => {
                            self.default_leaf.insert(user.to_owned(), leaf);
                        }
                    }
                }
            }
            Some(item) => p.error(item.span(), "default_leaf", "must be a table, [default_leaf]"),
        }

        // A user in several leaves must say which one is the default.
        let mut ambiguous: Vec<(&String, &Vec<LeafId>)> =
            self.member_of.iter().filter(|(user, leaves)| leaves.len() > 1 && !self.default_leaf.contains_key(*user)).collect();
        ambiguous.sort();
        for (user, leaves) in ambiguous {
            let first = &self.nodes[self.leaves[leaves[0] as usize] as usize];
            let places: Vec<String> = leaves
                .iter()
                .map(|&l| {
                    let n = &self.nodes[self.leaves[l as usize] as usize];
                    format!("{} (line {})", n.path, n.line)
                })
                .collect();
            p.errors.push(BudgetError {
                line: Some(self.nodes[self.leaves[leaves[1] as usize] as usize].line),
                field: format!("default_leaf.{user}"),
                message: format!(
                    "user '{user}' is a member of {}; add {user} = \"{}\" (or another of them) under [default_leaf] to say which one their jobs charge when they name no account",
                    places.join(" and "),
                    first.path
                ),
            });
        }
    }
}
