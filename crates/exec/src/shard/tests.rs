use super::*;

#[test]
fn shard_spec_parses_k_of_n_and_refuses_the_rest() {
    assert_eq!("2/3".parse::<ShardSpec>(), Ok(ShardSpec { k: 2, n: 3 }));
    assert_eq!(" 1 / 1 ".parse::<ShardSpec>(), Ok(ShardSpec { k: 1, n: 1 }));
    for bad in ["0/3", "4/3", "3", "a/b", "1/0", "-1/2", ""] {
        let e = bad.parse::<ShardSpec>().unwrap_err();
        assert!(e.contains("K/N"), "{bad}: {e}");
    }
}

#[test]
fn slurm_shard_comes_from_an_array_1_to_n_and_any_other_array_is_refused() {
    let env = |id: &str, min: &str, max: &str, count: &str| {
        let v: Vec<(String, String)> = [
            ("SLURM_ARRAY_TASK_ID", id),
            ("SLURM_ARRAY_TASK_MIN", min),
            ("SLURM_ARRAY_TASK_MAX", max),
            ("SLURM_ARRAY_TASK_COUNT", count),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        move |k: &str| v.iter().find(|(n, _)| n == k).map(|(_, x)| x.clone())
    };
    assert_eq!(
        ShardSpec::from_slurm(env("2", "1", "3", "3")),
        Ok(ShardSpec { k: 2, n: 3 })
    );
    // A resubmitted subset cannot say N.
    let e = ShardSpec::from_slurm(env("3", "3", "5", "2")).unwrap_err();
    assert!(e.contains("$SLURM_ARRAY_TASK_ID/N"), "{e}");
    // A 0-based array.
    assert!(ShardSpec::from_slurm(env("0", "0", "2", "3")).is_err());
    let e = ShardSpec::from_slurm(|_| None).unwrap_err();
    assert!(e.contains("SLURM_ARRAY_TASK_ID"), "{e}");
}

#[test]
fn partition_is_longest_first_onto_the_lightest_shard() {
    // 10 → 1, 7 → 2, 5 → 3, 4 → 3 (5 < 7), 3 → 2 (7 < 9).
    let costs = [5, 10, 3, 7, 4];
    let cut = partition(&costs, 3);
    assert_eq!(cut, vec![3, 1, 2, 2, 3]);
    let mut load = [0u64; 3];
    for (c, k) in costs.iter().zip(&cut) {
        load[*k as usize - 1] += c;
    }
    assert_eq!(load, [10, 10, 9]);
    // Every item gets a shard in 1..=n; one shard takes everything.
    assert_eq!(partition(&costs, 1), vec![1; 5]);
}

#[test]
fn partition_is_stable_and_ties_go_to_the_earlier_item_and_lower_shard() {
    let costs = [4, 4, 4, 4];
    assert_eq!(partition(&costs, 2), vec![1, 2, 1, 2]);
    assert_eq!(partition(&costs, 2), partition(&costs, 2));
    // Balanced within the largest item on many random-ish costs.
    let costs: Vec<u64> = (0..97u64).map(|i| (i * 7919) % 113 + 1).collect();
    for n in 1..=8u32 {
        let cut = partition(&costs, n);
        let mut load = vec![0u64; n as usize];
        for (c, k) in costs.iter().zip(&cut) {
            load[*k as usize - 1] += c;
        }
        let (lo, hi) = (load.iter().min().unwrap(), load.iter().max().unwrap());
        assert!(hi - lo <= 113, "n={n}: {load:?}");
    }
}

#[test]
fn listing_hashes_change_with_any_pair_field() {
    let pair = ShardPair {
        key: "a".into(),
        solution: "s".into(),
        solution_sha256: "00".into(),
        trace: "a/s.jsonl".into(),
        cost: 5,
        shard: 1,
    };
    let base = solutions_sha256(std::slice::from_ref(&pair), &[], None);
    let moved = ShardPair {
        shard: 2,
        ..pair.clone()
    };
    assert_ne!(base, solutions_sha256(&[moved], &[], None));
    assert_ne!(
        base,
        solutions_sha256(std::slice::from_ref(&pair), &["x".into()], None)
    );
    assert_ne!(
        base,
        solutions_sha256(std::slice::from_ref(&pair), &[], Some(1))
    );
    let p = |t: Option<&str>| ShardProblem {
        key: "a".into(),
        tree_sha256: t.map(Into::into),
    };
    assert_ne!(
        corpus_sha256(&[p(Some("1"))]),
        corpus_sha256(&[p(Some("2"))])
    );
    assert_ne!(corpus_sha256(&[p(Some("1"))]), corpus_sha256(&[p(None)]));
}
