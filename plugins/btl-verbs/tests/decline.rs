//! The component's answer to `query` where verbs cannot run, in this
//! process: a missing library is named, and without a device the reason is
//! libibverbs's own. Neither opens a module or moves a byte.

use std::path::Path;

use fireopal_abi::btl::BtlComponentImpl;
use fireopal_abi::host::JobInfo;
use fireopal_abi::param::ParamValue;
use fireopal_abi::Availability;
use fireopal_btl_verbs::VerbsComponent;
use fireopal_conformance::TestHost;

fn query(params: &[(&str, ParamValue)]) -> Availability {
    let job = JobInfo {
        rank: 0,
        size: 2,
        local_rank: 0,
        local_size: 2,
        job_key: [7; 32],
    };
    let params: Vec<(String, ParamValue)> = params
        .iter()
        .map(|(n, v)| ((*n).to_owned(), v.clone()))
        .collect();
    VerbsComponent::query(&TestHost::new(job, &params).into_host())
}

fn reason(a: &Availability) -> Option<String> {
    match a {
        Availability::Unavailable { reason } => Some(reason.to_string()),
        _ => None,
    }
}

#[test]
fn a_missing_library_is_named() {
    let a = query(&[(
        "btl_verbs_library",
        ParamValue::Str("/nonexistent/libibverbs.so.1".into()),
    )]);
    let why = reason(&a).expect("unavailable without its library");
    assert!(
        why.starts_with("/nonexistent/libibverbs.so.1 not found: "),
        "{why}"
    );
}

#[test]
fn a_library_without_the_verbs_functions_is_refused() {
    // libc is a shared library every test process has; it exports no
    // ibv_* function.
    let a = query(&[("btl_verbs_library", ParamValue::Str("libc.so.6".into()))]);
    let why = reason(&a).expect("unavailable");
    assert!(
        why.starts_with("libibverbs has no ibv_get_device_list"),
        "{why}"
    );
}

#[test]
fn without_a_device_the_reason_is_the_library_s() {
    let a = query(&[]);
    // Where the kernel has no verbs devices, ibv_get_device_list fails
    // (ENOSYS: "Function not implemented") or finds none.
    if Path::new("/sys/class/infiniband_verbs").exists() {
        eprintln!("this machine has verbs devices: {a:?}");
        return;
    }
    let why = reason(&a).expect("unavailable without a device");
    let library_missing = why.starts_with("libibverbs.so.1 not found: ");
    assert!(
        library_missing || why.starts_with("no RDMA device: ibv_get_device_list"),
        "{why}"
    );
    eprintln!("verbs declines: {why}");
}

#[test]
fn a_bad_parameter_names_itself() {
    let a = query(&[("btl_verbs_retry_count", ParamValue::UInt(9))]);
    let why = reason(&a).expect("unavailable");
    assert_eq!(why, "btl_verbs_retry_count: 9 is not in 0..=7");
    let a = query(&[("btl_verbs_device", ParamValue::Str("mlx5_0:x".into()))]);
    let why = reason(&a).expect("unavailable");
    assert!(why.starts_with("btl_verbs_device: "), "{why}");
}
