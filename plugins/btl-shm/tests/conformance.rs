//! The transport suite on shm, with four processes' modules in this one
//! (each maps the others' segments as a peer process would).

fireopal_conformance::transport_suite!(
    fireopal_btl_shm::ShmComponent,
    fireopal_conformance::Setup::ranks(4)
);
