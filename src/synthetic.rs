//! Synthetic budget trees of any size, for benchmarks and tests.
//!
//! `budget_toml(&[10, 50, 10])` makes 10 programs of 50 projects of 10 teams
//! (5,560 nodes, 5,000 leaves) with varied shares, an owner on every node, one
//! account and two members per leaf. Deterministic: same fan-out, same text.

/// Budget TOML for a tree with the given fan-out at each level.
pub fn budget_toml(fanout: &[usize], gpus: u32) -> String {
    let mut out = format!("[cluster]\ngpus = {gpus}\nlookback = \"7d\"\nmin_runtime_cap = \"8h\"\n\n[budget]\nowners = [\"root-admin\"]\n");
    let mut counter = 0usize;
    emit(&mut out, fanout, "budget", &mut counter);
    out
}

fn emit(out: &mut String, fanout: &[usize], prefix: &str, counter: &mut usize) {
    let Some((&width, rest)) = fanout.split_first() else { return };
    for i in 0..width {
        *counter += 1;
        let n = *counter;
        let name = format!("{prefix}.n{n}");
        // Shares 1..=7, varied so that effective shares differ.
        out.push_str(&format!("\n[{name}]\nshare = {}\nowners = [\"owner{n}\"]\n", 1 + (n * 7 + i) % 7));
        if rest.is_empty() {
            out.push_str(&format!("accounts = [\"acct{n}\"]\nmembers = [\"user{n}\", \"user{n}b\"]\n"));
        } else {
            emit(out, rest, &name, counter);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_with_the_promised_size() {
        let tree = crate::budget::BudgetTree::parse(&super::budget_toml(&[3, 4, 5], 64)).unwrap();
        assert_eq!(tree.nodes.len(), 1 + 3 + 12 + 60);
        assert_eq!(tree.leaves.len(), 60);
    }
}
