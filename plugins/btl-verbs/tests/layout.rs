//! The `#[repr(C)]` declarations of `ffi::types` against the installed
//! `<infiniband/verbs.h>`: a C program built with `cc` prints the size of
//! every declared structure and the offset of every declared field, and
//! each must equal Rust's. The data path calls through the context's ops
//! table and fills work requests by these layouts, so a difference would
//! be a crash on hardware, not a compile error.
//!
//! Skips, saying so, only when the header is not installed (Debian:
//! `libibverbs-dev`); CI installs it.

use std::mem::{offset_of, size_of};
use std::path::PathBuf;
use std::process::Command;

use fireopal_btl_verbs::ffi::types::*;

/// One value both sides print: a C expression and Rust's answer.
struct Check {
    c: String,
    rust: usize,
}

macro_rules! size {
    ($t:ident) => {
        Check {
            c: format!("sizeof(struct {})", stringify!($t)),
            rust: size_of::<$t>(),
        }
    };
    (union $t:ident) => {
        Check {
            c: format!("sizeof(union {})", stringify!($t)),
            rust: size_of::<$t>(),
        }
    };
}

macro_rules! fields {
    ($t:ident: $($f:ident),+ $(,)?) => {
        [$(Check {
            c: format!("offsetof(struct {}, {})", stringify!($t), stringify!($f)),
            rust: offset_of!($t, $f),
        }),+]
    };
}

/// A field whose C path differs from its Rust name (anonymous unions,
/// nested members): `c_path` inside `struct t`.
macro_rules! field_at {
    ($t:ident, $c_path:literal, $rust:expr) => {
        Check {
            c: format!("offsetof(struct {}, {})", stringify!($t), $c_path),
            rust: $rust,
        }
    };
}

fn checks() -> Vec<Check> {
    let mut v = vec![
        size!(union ibv_gid),
        size!(ibv_device_attr),
        size!(ibv_port_attr),
        size!(ibv_device),
        size!(ibv_context_ops),
        size!(ibv_context),
        size!(ibv_pd),
        size!(ibv_mr),
        size!(ibv_wc),
        size!(ibv_sge),
        size!(ibv_send_wr),
        size!(ibv_recv_wr),
        size!(ibv_qp_cap),
        size!(ibv_qp_init_attr),
        size!(ibv_global_route),
        size!(ibv_ah_attr),
        size!(ibv_qp_attr),
        size!(ibv_srq_attr),
        size!(ibv_srq_init_attr),
    ];
    // Alignment too: a union's alignment comes from members not declared
    // here (ibv_gid's two 64-bit words), and decides where it is placed.
    v.extend([
        Check {
            c: "_Alignof(union ibv_gid)".into(),
            rust: std::mem::align_of::<ibv_gid>(),
        },
        Check {
            c: "_Alignof(struct ibv_qp_attr)".into(),
            rust: std::mem::align_of::<ibv_qp_attr>(),
        },
        Check {
            c: "_Alignof(struct ibv_send_wr)".into(),
            rust: std::mem::align_of::<ibv_send_wr>(),
        },
        Check {
            c: "_Alignof(struct ibv_wc)".into(),
            rust: std::mem::align_of::<ibv_wc>(),
        },
    ]);
    v.extend(fields!(ibv_device_attr:
        fw_ver, node_guid, sys_image_guid, max_mr_size, page_size_cap, vendor_id,
        vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags, max_sge, max_sge_rd,
        max_cq, max_cqe, max_mr, max_pd, max_qp_rd_atom, max_ee_rd_atom, max_res_rd_atom,
        max_qp_init_rd_atom, max_ee_init_rd_atom, atomic_cap, max_ee, max_rdd, max_mw,
        max_raw_ipv6_qp, max_raw_ethy_qp, max_mcast_grp, max_mcast_qp_attach,
        max_total_mcast_qp_attach, max_ah, max_fmr, max_map_per_fmr, max_srq, max_srq_wr,
        max_srq_sge, max_pkeys, local_ca_ack_delay, phys_port_cnt));
    v.extend(fields!(ibv_port_attr:
        state, max_mtu, active_mtu, gid_tbl_len, port_cap_flags, max_msg_sz, bad_pkey_cntr,
        qkey_viol_cntr, pkey_tbl_len, lid, sm_lid, lmc, max_vl_num, sm_sl, subnet_timeout,
        init_type_reply, active_width, active_speed, phys_state, link_layer, flags,
        port_cap_flags2));
    v.extend(fields!(ibv_device:
        _ops, node_type, transport_type, name, dev_name, dev_path, ibdev_path));
    v.extend(fields!(ibv_context_ops:
        _compat_query_device, _compat_query_port, _compat_alloc_pd, _compat_dealloc_pd,
        _compat_reg_mr, _compat_rereg_mr, _compat_dereg_mr, alloc_mw, bind_mw, dealloc_mw,
        _compat_create_cq, poll_cq, req_notify_cq, _compat_cq_event, _compat_resize_cq,
        _compat_destroy_cq, _compat_create_srq, _compat_modify_srq, _compat_query_srq,
        _compat_destroy_srq, post_srq_recv, _compat_create_qp, _compat_query_qp,
        _compat_modify_qp, _compat_destroy_qp, post_send, post_recv, _compat_create_ah,
        _compat_destroy_ah, _compat_attach_mcast, _compat_detach_mcast, _compat_async_event));
    v.extend(fields!(ibv_context:
        device, ops, cmd_fd, async_fd, num_comp_vectors, mutex, abi_compat));
    v.extend(fields!(ibv_pd: context, handle));
    v.extend(fields!(ibv_mr: context, pd, addr, length, handle, lkey, rkey));
    // Declared up to their locks: offsets only.
    v.extend(fields!(ibv_cq: context, channel, cq_context, handle, cqe));
    v.extend(fields!(ibv_srq: context, srq_context, pd, handle));
    v.extend(fields!(ibv_qp:
        context, qp_context, pd, send_cq, recv_cq, srq, handle, qp_num, state, qp_type));
    v.extend(fields!(ibv_wc:
        wr_id, status, opcode, vendor_err, byte_len, imm_data, qp_num, src_qp, wc_flags,
        pkey_index, slid, sl, dlid_path_bits));
    v.extend(fields!(ibv_sge: addr, length, lkey));
    v.extend(fields!(ibv_send_wr:
        wr_id, next, sg_list, num_sge, opcode, send_flags, imm_data, wr, qp_type));
    let wr = offset_of!(ibv_send_wr, wr);
    v.extend([
        field_at!(ibv_send_wr, "bind_mw", offset_of!(ibv_send_wr, _bind_mw)),
        field_at!(
            ibv_send_wr,
            "wr.rdma.remote_addr",
            wr + offset_of!(ibv_send_wr_rdma, remote_addr)
        ),
        field_at!(
            ibv_send_wr,
            "wr.rdma.rkey",
            wr + offset_of!(ibv_send_wr_rdma, rkey)
        ),
        field_at!(ibv_send_wr, "wr.ud.ah", wr + offset_of!(ibv_send_wr_ud, ah)),
        field_at!(
            ibv_send_wr,
            "wr.ud.remote_qpn",
            wr + offset_of!(ibv_send_wr_ud, remote_qpn)
        ),
        field_at!(
            ibv_send_wr,
            "wr.ud.remote_qkey",
            wr + offset_of!(ibv_send_wr_ud, remote_qkey)
        ),
        Check {
            c: "sizeof(((struct ibv_send_wr *)0)->wr)".into(),
            rust: size_of::<ibv_send_wr_wr>(),
        },
    ]);
    v.extend(fields!(ibv_recv_wr: wr_id, next, sg_list, num_sge));
    v.extend(fields!(ibv_qp_cap:
        max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data));
    v.extend(fields!(ibv_qp_init_attr:
        qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all));
    v.extend(fields!(ibv_global_route:
        dgid, flow_label, sgid_index, hop_limit, traffic_class));
    v.extend(fields!(ibv_ah_attr:
        grh, dlid, sl, src_path_bits, static_rate, is_global, port_num));
    v.extend(fields!(ibv_qp_attr:
        qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn, dest_qp_num,
        qp_access_flags, cap, ah_attr, alt_ah_attr, pkey_index, alt_pkey_index,
        en_sqd_async_notify, sq_draining, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer,
        port_num, timeout, retry_cnt, rnr_retry, alt_port_num, alt_timeout, rate_limit));
    v.extend(fields!(ibv_srq_attr: max_wr, max_sge, srq_limit));
    v.extend(fields!(ibv_srq_init_attr: srq_context, attr));
    v
}

/// Constants the plugin posts with, against the header's enums.
fn constants() -> Vec<(&'static str, i64)> {
    vec![
        ("IBV_PORT_ACTIVE", i64::from(IBV_PORT_ACTIVE)),
        (
            "IBV_LINK_LAYER_INFINIBAND",
            i64::from(IBV_LINK_LAYER_INFINIBAND),
        ),
        (
            "IBV_LINK_LAYER_ETHERNET",
            i64::from(IBV_LINK_LAYER_ETHERNET),
        ),
        ("IBV_QPT_RC", i64::from(IBV_QPT_RC)),
        ("IBV_QPT_UD", i64::from(IBV_QPT_UD)),
        ("IBV_QPS_INIT", i64::from(IBV_QPS_INIT)),
        ("IBV_QPS_RTR", i64::from(IBV_QPS_RTR)),
        ("IBV_QPS_RTS", i64::from(IBV_QPS_RTS)),
        ("IBV_QP_STATE", i64::from(IBV_QP_STATE)),
        ("IBV_QP_ACCESS_FLAGS", i64::from(IBV_QP_ACCESS_FLAGS)),
        ("IBV_QP_PKEY_INDEX", i64::from(IBV_QP_PKEY_INDEX)),
        ("IBV_QP_PORT", i64::from(IBV_QP_PORT)),
        ("IBV_QP_QKEY", i64::from(IBV_QP_QKEY)),
        ("IBV_QP_AV", i64::from(IBV_QP_AV)),
        ("IBV_QP_PATH_MTU", i64::from(IBV_QP_PATH_MTU)),
        ("IBV_QP_TIMEOUT", i64::from(IBV_QP_TIMEOUT)),
        ("IBV_QP_RETRY_CNT", i64::from(IBV_QP_RETRY_CNT)),
        ("IBV_QP_RNR_RETRY", i64::from(IBV_QP_RNR_RETRY)),
        ("IBV_QP_RQ_PSN", i64::from(IBV_QP_RQ_PSN)),
        (
            "IBV_QP_MAX_QP_RD_ATOMIC",
            i64::from(IBV_QP_MAX_QP_RD_ATOMIC),
        ),
        ("IBV_QP_MIN_RNR_TIMER", i64::from(IBV_QP_MIN_RNR_TIMER)),
        ("IBV_QP_SQ_PSN", i64::from(IBV_QP_SQ_PSN)),
        (
            "IBV_QP_MAX_DEST_RD_ATOMIC",
            i64::from(IBV_QP_MAX_DEST_RD_ATOMIC),
        ),
        ("IBV_QP_DEST_QPN", i64::from(IBV_QP_DEST_QPN)),
        ("IBV_ACCESS_LOCAL_WRITE", i64::from(IBV_ACCESS_LOCAL_WRITE)),
        (
            "IBV_ACCESS_REMOTE_WRITE",
            i64::from(IBV_ACCESS_REMOTE_WRITE),
        ),
        ("IBV_ACCESS_REMOTE_READ", i64::from(IBV_ACCESS_REMOTE_READ)),
        ("IBV_WR_RDMA_WRITE", i64::from(IBV_WR_RDMA_WRITE)),
        ("IBV_WR_SEND", i64::from(IBV_WR_SEND)),
        ("IBV_WR_RDMA_READ", i64::from(IBV_WR_RDMA_READ)),
        ("IBV_SEND_SIGNALED", i64::from(IBV_SEND_SIGNALED)),
        ("IBV_SEND_INLINE", i64::from(IBV_SEND_INLINE)),
        ("IBV_WC_RECV", i64::from(IBV_WC_RECV)),
        ("IBV_WC_GRH", i64::from(IBV_WC_GRH)),
        ("IBV_SYSFS_NAME_MAX", IBV_SYSFS_NAME_MAX as i64),
        ("IBV_SYSFS_PATH_MAX", IBV_SYSFS_PATH_MAX as i64),
        (
            "IBV_WC_SUCCESS",
            i64::from(fireopal_btl_verbs::completion::WC_SUCCESS),
        ),
        (
            "IBV_WC_WR_FLUSH_ERR",
            i64::from(fireopal_btl_verbs::completion::WC_WR_FLUSH_ERR),
        ),
    ]
}

fn work_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("verbs-layout");
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// Whether `cc` finds the header; `Err` with the compiler's words if not.
fn header_present(dir: &std::path::Path) -> Result<(), String> {
    let probe = dir.join("probe.c");
    std::fs::write(&probe, "#include <infiniband/verbs.h>\n").expect("write probe");
    let out = Command::new("cc")
        .arg("-E")
        .arg(&probe)
        .arg("-o")
        .arg(dir.join("probe.i"))
        .output()
        .expect("cc must be installed (README: prerequisites)");
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[test]
fn declarations_match_the_installed_header() {
    let dir = work_dir();
    if let Err(why) = header_present(&dir) {
        assert!(
            why.contains("infiniband/verbs.h"),
            "cc failed for another reason than a missing header:\n{why}"
        );
        eprintln!(
            "skipped: <infiniband/verbs.h> is not installed (apt-get install libibverbs-dev)"
        );
        return;
    }
    let checks = checks();
    let consts = constants();
    let mut c = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include <infiniband/verbs.h>\nint main(void) {\n",
    );
    for k in &checks {
        c.push_str(&format!("    printf(\"%zu\\n\", (size_t)({}));\n", k.c));
    }
    for (name, _) in &consts {
        c.push_str(&format!("    printf(\"%lld\\n\", (long long)({name}));\n"));
    }
    c.push_str("    return 0;\n}\n");
    let src = dir.join("layout.c");
    let exe = dir.join("layout");
    std::fs::write(&src, c).expect("write layout.c");
    let out = Command::new("cc")
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "layout.c does not build:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&exe).output().expect("run layout");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let values: Vec<&str> = text.lines().collect();
    assert_eq!(values.len(), checks.len() + consts.len());
    let mut wrong = Vec::new();
    for (k, v) in checks.iter().zip(&values) {
        if v.parse::<usize>() != Ok(k.rust) {
            wrong.push(format!("{}: C {v}, Rust {}", k.c, k.rust));
        }
    }
    for ((name, rust), v) in consts.iter().zip(&values[checks.len()..]) {
        if v.parse::<i64>() != Ok(*rust) {
            wrong.push(format!("{name}: C {v}, Rust {rust}"));
        }
    }
    assert!(wrong.is_empty(), "layouts differ:\n{}", wrong.join("\n"));
    println!(
        "{} sizes and offsets and {} constants match <infiniband/verbs.h>",
        checks.len(),
        consts.len()
    );
}
