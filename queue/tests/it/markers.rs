//! The ?A markers: sweep_markers keeps a tenant's marker while it has due or
//! lane work.

use crate::support::*;

#[test]
fn sweep_markers_keeps_active_while_due_or_lane_work_exists() {
    let kv = store();
    ingest(&kv, T1, 1, &[plain(S0)]);
    // ?D present: nothing to do.
    assert!(sweep_markers(&kv, T1).expect("sweep").is_empty());
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    // Only ?F: the marker goes.
    let b = sweep_markers(&kv, T1).expect("sweep");
    assert_eq!(
        b.ops(),
        &[ankusa_engine::Op::Delete {
            cf: Cf::Index,
            key: active_key(T1).to_vec()
        }]
    );
    commit(&kv, b);
    assert!(keys(&kv, Family::Active, T1).is_empty());
    assert!(sweep_markers_recheck(&kv, T1).expect("recheck").is_empty());
    clean(&kv);
    // A ?P alone keeps it (a member waiting for its promote).
    ingest(&kv, T1, 2, &[laned(S1, "k")]);
    assert!(sweep_markers(&kv, T1).expect("sweep").is_empty());
    // A writer's ?D racing a delete: the recheck puts ?A back.
    let mut b = Batch::new();
    b.delete(Cf::Index, active_key(T1));
    commit(&kv, b);
    commit(&kv, sweep_markers_recheck(&kv, T1).expect("recheck"));
    assert_eq!(keys(&kv, Family::Active, T1), vec![active_key(T1).to_vec()]);
    clean(&kv);
}
