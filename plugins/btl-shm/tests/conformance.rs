//! The transport suite on shm, with each job's modules in this one process
//! (each maps the others' segments as a peer process would): four ranks
//! with the defaults, eight ranks (smaller fast boxes), four with
//! checksums, and two with a tiny receive queue and the smallest fast
//! boxes, where `sendi` is often `Busy` and sends wait in the process.

use fireopal_abi::param::ParamValue;
use fireopal_btl_shm::{ShmComponent, PARAM_CHECKSUM, PARAM_FBOX_SIZE, PARAM_FIFO_SLOTS};
use fireopal_conformance::{transport_suite, Setup};

transport_suite!(ShmComponent, Setup::ranks(4));

mod eight_ranks {
    use super::*;

    transport_suite!(ShmComponent, Setup::ranks(8));
}

mod checksums {
    use super::*;

    transport_suite!(
        ShmComponent,
        Setup::ranks(4).param(PARAM_CHECKSUM, ParamValue::Bool(true))
    );
}

mod tiny_queue {
    use super::*;

    transport_suite!(
        ShmComponent,
        Setup::ranks(2)
            .param(PARAM_FIFO_SLOTS, ParamValue::UInt(2))
            .param(PARAM_FBOX_SIZE, ParamValue::Size(4096))
    );
}
