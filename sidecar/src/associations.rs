//! `allot associations`: the Slurm accounts and user associations the budget
//! needs when Slurm keeps accounting in slurmdbd.
//!
//! With `AccountingStorageEnforce=associations`, slurmctld refuses any job
//! whose user has no association with its account, before allot sees it. So
//! every account a budget leaf charges must exist in slurmdbd, and every
//! member of a leaf needs an association with each of the leaf's accounts.
//! allot decides who may charge what (the budget); slurmdbd only has to let
//! those jobs in. This command derives the `sacctmgr` lines from the budget
//! in the ledger, prints them for review, or applies the missing ones.
//!
//! The accounts are flat under Slurm's root account: allot's fair-share comes
//! from its own tree, not Slurm's, so the hierarchy is not copied (each
//! account's Organization names its budget's top-level node, its
//! Description the leaf). Nothing is ever removed: an association the budget
//! no longer needs is listed for the admin to remove by hand.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use allot::budget::BudgetTree;
use anyhow::{anyhow, bail, Context};

/// One Slurm account a budget leaf charges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountLine {
    pub account: String,
    /// The leaf's path (`vision/detection/tracking`).
    pub leaf: String,
    /// The leaf's top-level node (`vision`), Slurm's Organization.
    pub organization: String,
}

/// One user and the accounts they need associations with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserLine {
    pub user: String,
    /// Every account of every leaf the user is a member of, sorted.
    pub accounts: Vec<String>,
    /// The first account of the user's default leaf, if they have one.
    pub default_account: Option<String>,
}

/// What slurmdbd must hold for the budget's jobs to be admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub cluster: String,
    pub accounts: Vec<AccountLine>,
    pub users: Vec<UserLine>,
    /// Leaves open to anyone (`members = ["*"]`): their users cannot be
    /// listed; (leaf path, its accounts).
    pub open_leaves: Vec<(String, Vec<String>)>,
}

/// The associations `tree` needs in `cluster`.
pub fn plan(tree: &BudgetTree, cluster: &str) -> Plan {
    let mut accounts = Vec::new();
    let mut open_leaves = Vec::new();
    let mut by_user: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for &id in &tree.leaves {
        let node = tree.node(id);
        let organization = node.path.split('/').next().unwrap_or_default().to_owned();
        for account in &node.accounts {
            accounts.push(AccountLine { account: account.clone(), leaf: node.path.clone(), organization: organization.clone() });
        }
        for member in &node.members {
            if member == "*" {
                open_leaves.push((node.path.clone(), node.accounts.clone()));
            } else {
                by_user.entry(member).or_default().extend(node.accounts.iter().cloned());
            }
        }
    }
    let users = by_user
        .into_iter()
        .map(|(user, accounts)| UserLine {
            user: user.to_owned(),
            default_account: tree.default_leaf(user).and_then(|leaf| tree.leaf_node(leaf).accounts.first().cloned()),
            accounts: accounts.into_iter().collect(),
        })
        .collect();
    Plan { cluster: cluster.to_owned(), accounts, users, open_leaves }
}

/// A `sacctmgr` argument value, quoted for a shell when it needs it.
fn shell_word(value: &str) -> String {
    if !value.is_empty() && value.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:,=@+".contains(c)) {
        value.to_owned()
    } else {
        format!("'{}'", value.replace('\'', "'\\''"))
    }
}

impl AccountLine {
    fn args(&self, cluster: &str) -> Vec<String> {
        vec![
            "add".into(),
            "account".into(),
            self.account.clone(),
            format!("Cluster={cluster}"),
            format!("Description=allot budget {}", self.leaf),
            format!("Organization={}", self.organization),
        ]
    }
}

/// One `sacctmgr add user` line: these users, each with these accounts
/// and (users new to slurmdbd only) this default. Users alike share a line:
/// on 22.05 each sacctmgr call takes about half a second.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct AddUsers {
    accounts: Vec<String>,
    default: Option<String>,
    users: Vec<String>,
}

impl AddUsers {
    fn args(&self, cluster: &str) -> Vec<String> {
        let mut args = vec!["add".into(), "user".into(), self.users.join(","), format!("Cluster={cluster}"), format!("Account={}", self.accounts.join(","))];
        if let Some(default) = &self.default {
            args.push(format!("DefaultAccount={default}"));
        }
        args
    }
}

/// Groups (user, accounts to add, default) into as few lines as may be.
fn group_users(each: impl IntoIterator<Item = (String, Vec<String>, Option<String>)>) -> Vec<AddUsers> {
    let mut lines: BTreeMap<(Vec<String>, Option<String>), Vec<String>> = BTreeMap::new();
    for (user, accounts, default) in each {
        lines.entry((accounts, default)).or_default().push(user);
    }
    let mut out: Vec<AddUsers> = lines.into_iter().map(|((accounts, default), users)| AddUsers { accounts, default, users }).collect();
    out.sort_by(|a, b| a.users.cmp(&b.users));
    out
}

impl UserLine {
    /// The default a user new to slurmdbd gets with `accounts`: their
    /// default leaf's account if it is one of them, else the first.
    /// (Changing an existing user's default with `add user` leaves
    /// slurmctld's cache without one, a Slurm bug: never done here.)
    fn default_among(&self, accounts: &[String]) -> Option<String> {
        self.default_account.as_ref().filter(|d| accounts.contains(d)).or(accounts.first()).cloned()
    }
}

/// The plan as a shell script of `sacctmgr -i` lines, for review.
pub fn render(plan: &Plan, version: i64) -> String {
    let mut out = format!(
        "# The Slurm accounts and associations that allot's budget (version {version}) needs in\n\
         # cluster {}, for slurmctld's AccountingStorageEnforce=associations: every account a\n\
         # leaf charges, and an association of each member with each of the leaf's accounts.\n\
         # Review, then run this (or: allot associations --apply, which adds only what is missing).\n",
        plan.cluster
    );
    let line = |args: Vec<String>| format!("sacctmgr -i {}\n", args.iter().map(|a| shell_word(a)).collect::<Vec<_>>().join(" "));
    for a in &plan.accounts {
        out.push_str(&line(a.args(&plan.cluster)));
    }
    for add in group_users(plan.users.iter().map(|u| (u.user.clone(), u.accounts.clone(), u.default_among(&u.accounts)))) {
        out.push_str(&line(add.args(&plan.cluster)));
    }
    for (leaf, accounts) in &plan.open_leaves {
        out.push_str(&format!(
            "# {leaf} admits anyone (members = [\"*\"]): give each user who charges it an association yourself:\n\
             #   sacctmgr -i add user NAME Cluster={} Account={}\n",
            plan.cluster,
            accounts.join(",")
        ));
    }
    out
}

/// Runs `sacctmgr` (from PATH) with `args`; its output, or an error that
/// quotes what it said.
fn sacctmgr(args: &[String]) -> anyhow::Result<String> {
    let out = Command::new("sacctmgr").args(args).output().context("cannot run sacctmgr (is Slurm's client installed and on PATH?)")?;
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if !out.status.success() {
        bail!("sacctmgr {} failed ({}): {}", args.join(" "), out.status, said.trim());
    }
    Ok(said)
}

/// Associations slurmdbd holds for `cluster`: accounts, and (user, account)
/// pairs, from `sacctmgr -nP show assoc`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Existing {
    pub accounts: BTreeSet<String>,
    pub pairs: BTreeSet<(String, String)>,
}

/// Reads `sacctmgr -nP show assoc format=account,user` output.
pub fn parse_existing(text: &str) -> Existing {
    let mut e = Existing::default();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let mut fields = line.split('|');
        let (Some(account), user) = (fields.next().map(str::trim), fields.next().map(str::trim).unwrap_or("")) else { continue };
        if account.is_empty() {
            continue;
        }
        e.accounts.insert(account.to_lowercase());
        if !user.is_empty() {
            e.pairs.insert((user.to_owned(), account.to_lowercase()));
        }
    }
    e
}

/// The `sacctmgr` argument lists that add what `existing` lacks, and the
/// associations `existing` has that the plan does not need (left alone).
pub fn missing(plan: &Plan, existing: &Existing) -> (Vec<Vec<String>>, Vec<(String, String)>) {
    let mut commands = Vec::new();
    for a in plan.accounts.iter().filter(|a| !existing.accounts.contains(&a.account)) {
        commands.push(a.args(&plan.cluster));
    }
    let known_users: BTreeSet<&str> = existing.pairs.iter().map(|(u, _)| u.as_str()).collect();
    let mut wanted = BTreeSet::new();
    let mut adds = Vec::new();
    for u in &plan.users {
        let lacking: Vec<String> = u.accounts.iter().filter(|a| !existing.pairs.contains(&(u.user.clone(), (*a).clone()))).cloned().collect();
        for a in &u.accounts {
            wanted.insert((u.user.clone(), a.clone()));
        }
        if !lacking.is_empty() {
            let default = if known_users.contains(u.user.as_str()) { None } else { u.default_among(&lacking) };
            adds.push((u.user.clone(), lacking, default));
        }
    }
    commands.extend(group_users(adds).iter().map(|add| add.args(&plan.cluster)));
    // Open leaves' users cannot be told apart from strays: not listed.
    let open: BTreeSet<&String> = plan.open_leaves.iter().flat_map(|(_, a)| a).collect();
    let budget_accounts: BTreeSet<&String> = plan.accounts.iter().map(|a| &a.account).collect();
    let extra = existing
        .pairs
        .iter()
        .filter(|(u, a)| budget_accounts.contains(a) && !open.contains(a) && !wanted.contains(&(u.clone(), a.clone())) && u != "root")
        .cloned()
        .collect();
    (commands, extra)
}

/// `allot associations --apply`: adds the missing accounts and associations
/// with `sacctmgr`, and says what it did.
pub fn apply(plan: &Plan) -> anyhow::Result<()> {
    let listed = sacctmgr(&["-nP".into(), "show".into(), "assoc".into(), format!("cluster={}", plan.cluster), "format=account,user".into()])?;
    let existing = parse_existing(&listed);
    let (commands, extra) = missing(plan, &existing);
    if commands.is_empty() {
        println!(
            "cluster {}: every account and association the budget needs is there ({} accounts, {} users)",
            plan.cluster,
            plan.accounts.len(),
            plan.users.len()
        );
    }
    for args in &commands {
        let mut full = vec!["-i".to_owned()];
        full.extend(args.iter().cloned());
        sacctmgr(&full)?;
        println!("sacctmgr {}", args.iter().map(|a| shell_word(a)).collect::<Vec<_>>().join(" "));
    }
    for (leaf, accounts) in &plan.open_leaves {
        println!("note: {leaf} admits anyone: give each of its users an association with {} yourself", accounts.join(","));
    }
    for (user, account) in &extra {
        println!("note: {user} has an association with {account}, which the budget does not give them (allot refuses their jobs there); remove it with: sacctmgr -i delete user {user} account={account} cluster={}", plan.cluster);
    }
    Ok(())
}

/// The cluster name: `--cluster`, else `ClusterName` of slurm.conf.
pub fn cluster_name(flag: Option<&str>) -> anyhow::Result<String> {
    if let Some(c) = flag {
        return Ok(c.to_owned());
    }
    let path = crate::identity::slurm_conf_path();
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {} for its ClusterName (or give --cluster)", path.display()))?;
    crate::identity::conf_value(&text, "ClusterName").map(|c| c.to_lowercase()).ok_or_else(|| anyhow!("{} has no ClusterName (give --cluster)", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUDGET: &str = r#"
[default_leaf]
dave = "lab/teama"

[budget]
owners = ["root"]

[budget.lab]
share = 1

[budget.lab.teama]
share = 1
accounts = ["teama", "teama-gpu"]
members = ["alice", "dave"]

[budget.lab.teamb]
share = 1
accounts = ["teamb"]
members = ["bob", "dave"]

[budget.open]
share = 1
accounts = ["guest"]
members = ["*"]
"#;

    fn tree() -> BudgetTree {
        BudgetTree::parse(BUDGET).expect("the test budget parses")
    }

    #[test]
    fn every_member_gets_every_account_of_their_leaves_and_their_default() {
        let p = plan(&tree(), "allot");
        let accounts: Vec<&str> = p.accounts.iter().map(|a| a.account.as_str()).collect();
        assert_eq!(accounts, ["teama", "teama-gpu", "teamb", "guest"]);
        assert_eq!((p.accounts[0].leaf.as_str(), p.accounts[0].organization.as_str()), ("lab/teama", "lab"));
        let dave = p.users.iter().find(|u| u.user == "dave").unwrap();
        assert_eq!(dave.accounts, ["teama", "teama-gpu", "teamb"]);
        assert_eq!(dave.default_account.as_deref(), Some("teama"));
        let bob = p.users.iter().find(|u| u.user == "bob").unwrap();
        assert_eq!((bob.accounts.as_slice(), bob.default_account.as_deref()), (&["teamb".to_owned()][..], Some("teamb")));
        assert_eq!(p.open_leaves, [("open".to_owned(), vec!["guest".to_owned()])]);
        assert!(p.users.iter().all(|u| u.user != "*"));
    }

    #[test]
    fn renders_sacctmgr_lines_quoting_what_a_shell_would_split() {
        let text = render(&plan(&tree(), "allot"), 3);
        assert!(text.contains("sacctmgr -i add account teama Cluster=allot 'Description=allot budget lab/teama' Organization=lab\n"), "{text}");
        assert!(text.contains("sacctmgr -i add user dave Cluster=allot Account=teama,teama-gpu,teamb DefaultAccount=teama\n"), "{text}");
        assert!(text.contains("# open admits anyone"), "{text}");
        assert!(text.lines().all(|l| l.starts_with("sacctmgr -i ") || l.starts_with('#')), "{text}");
    }

    #[test]
    fn adds_only_what_is_missing_and_names_strays() {
        let p = plan(&tree(), "allot");
        let existing = parse_existing("root|\nroot|root\nteama|\nteama|alice\nteamb|\nteamb|alice\n");
        let (commands, extra) = missing(&p, &existing);
        let lines: Vec<String> = commands.iter().map(|c| c.join(" ")).collect();
        assert_eq!(
            lines,
            [
                "add account teama-gpu Cluster=allot Description=allot budget lab/teama Organization=lab",
                "add account guest Cluster=allot Description=allot budget open Organization=open",
                // alice exists: her missing association comes with no new default.
                "add user alice Cluster=allot Account=teama-gpu",
                "add user bob Cluster=allot Account=teamb DefaultAccount=teamb",
                "add user dave Cluster=allot Account=teama,teama-gpu,teamb DefaultAccount=teama",
            ]
        );
        // alice may not charge teamb: named, not removed.
        assert_eq!(extra, [("alice".to_owned(), "teamb".to_owned())]);
        let (again, _) = missing(
            &p,
            &parse_existing("teama|\nteama-gpu|\nteamb|\nguest|\nteama|alice\nteama-gpu|alice\nteamb|bob\nteama|dave\nteama-gpu|dave\nteamb|dave\n"),
        );
        assert!(again.is_empty(), "{again:?}");
    }

    #[test]
    fn users_alike_share_one_sacctmgr_line() {
        let tree = BudgetTree::parse(&BUDGET.replace(r#"members = ["bob", "dave"]"#, r#"members = ["bob", "erin", "dave"]"#)).unwrap();
        let text = render(&plan(&tree, "allot"), 1);
        assert!(text.contains("sacctmgr -i add user bob,erin Cluster=allot Account=teamb DefaultAccount=teamb\n"), "{text}");
        let (commands, _) = missing(&plan(&tree, "allot"), &parse_existing("teama|\nteama-gpu|\nteamb|\nguest|\n"));
        assert_eq!(commands.iter().filter(|c| c[1] == "user").count(), 3, "alice, bob+erin, dave: {commands:?}");
    }

    #[test]
    fn an_existing_user_gets_the_missing_accounts_without_a_new_default() {
        let p = plan(&tree(), "allot");
        let (commands, _) = missing(&p, &parse_existing("teama|\nteama-gpu|\nteamb|\nguest|\nteamb|dave\n"));
        assert!(commands.iter().any(|c| c.join(" ") == "add user dave Cluster=allot Account=teama,teama-gpu"), "{commands:?}");
    }
}
