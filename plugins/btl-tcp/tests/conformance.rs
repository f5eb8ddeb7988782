//! The transport suite on tcp, with three ranks' modules in this process
//! talking over 127.0.0.1.

use fireopal_abi::param::ParamValue;

fireopal_conformance::transport_suite!(
    fireopal_btl_tcp::TcpComponent,
    fireopal_conformance::Setup::ranks(3)
        .param("btl_tcp_if_include", ParamValue::Str("127.0.0.1".into()))
);

/// With frames of at most 1 MiB, so that large messages are refused
/// sooner and large puts and gets go in several frames.
mod small_frames {
    use fireopal_abi::param::ParamValue;

    fireopal_conformance::transport_suite!(
        fireopal_btl_tcp::TcpComponent,
        fireopal_conformance::Setup::ranks(2)
            .param("btl_tcp_if_include", ParamValue::Str("127.0.0.1".into()))
            .param("btl_tcp_max_send_size", ParamValue::Size(1 << 20))
    );
}

/// With socket buffers of 16 KiB, so that a large send, put or answer
/// leaves in many writes and its rest waits in the queue: copied for a
/// `send`, borrowed where it is for `send_in_place` and RDMA.
mod small_socket_buffers {
    use fireopal_abi::param::ParamValue;

    fireopal_conformance::transport_suite!(
        fireopal_btl_tcp::TcpComponent,
        fireopal_conformance::Setup::ranks(2)
            .param("btl_tcp_if_include", ParamValue::Str("127.0.0.1".into()))
            .param("btl_tcp_sndbuf", ParamValue::Size(16 << 10))
            .param("btl_tcp_rcvbuf", ParamValue::Size(16 << 10))
    );
}
