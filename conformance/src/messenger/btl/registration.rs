//! Registrations through the messenger's cache while memory comes and
//! goes: memory unmapped and mapped again at the same address gets a new
//! registration and its new contents reach the peer, and a peer's get on
//! the registration of unmapped memory fails without hurting the target.

use fireopal::btl::MemoryHandle;
use fireopal_abi::btl::{Access, BtlFlags, MemRegion};

use super::super::mapping::Mapping;
use super::{pattern, Ctx, Outcome, TAG_REG_DONE};

/// Bytes of the mapping each case registers.
const LEN: usize = 64 << 10;

fn gets_offered(c: &mut Ctx) -> bool {
    c.m.attributes(c.next)
        .is_some_and(|a| a.flags.contains(BtlFlags::GET))
}

/// Registers `map` for the previous rank's gets and trades keys: returns
/// the handle, and the next rank's address and key.
fn publish(c: &mut Ctx, name: &str, map: &Mapping) -> Result<(MemoryHandle, u64, Vec<u8>), String> {
    let handle =
        c.m.register_memory(c.prev, map.region(), Access::REMOTE_READ)
            .map_err(|e| format!("register: {e}"))?;
    let mut record = (map.addr as u64).to_le_bytes().to_vec();
    record.extend_from_slice(handle.remote_key());
    c.boot.put(name, &record).map_err(|e| e.to_string())?;
    c.boot.fence().map_err(|e| e.to_string())?;
    let theirs = c.boot.get(c.next, name).map_err(|e| e.to_string())?;
    if theirs.len() < 8 {
        return Err("short registration record".into());
    }
    let (addr, key) = theirs.split_at(8);
    let addr = u64::from_le_bytes(addr.try_into().map_err(|_| "short record")?);
    Ok((handle, addr, key.to_vec()))
}

/// Gets [`LEN`] bytes from the next rank: `Ok(Some(bytes))`, or `Ok(None)`
/// if the get was refused (at the call or through its completion). Every
/// rank gets from the next one at once, and a target serves only while it
/// progresses, so each progresses until its own get is done and the
/// previous rank said its get (on this rank's memory) is done too.
#[allow(unsafe_code)]
fn get_from_next(c: &mut Ctx, addr: u64, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
    c.registration_gets += 1;
    let round = c.registration_gets;
    let mut back = vec![0u8; LEN];
    // SAFETY: `back` outlives the get, which completes before it returns.
    let region = unsafe { MemRegion::new(back.as_mut_ptr(), LEN) };
    let ticket = c.m.get(c.next, region, None, addr, key).ok();
    let mut told = false;
    c.wait("a get, and the previous rank's get", |c| {
        let done = ticket.is_none_or(|t| c.rdma_status(t).is_some());
        if done && !told {
            told = c.send(TAG_REG_DONE, &[], &[]).is_ok();
        }
        told && c.inbox_count(TAG_REG_DONE) >= round
    })?;
    let fetched = ticket.is_some_and(|t| c.rdma_status(t) == Some(true));
    Ok(fetched.then_some(back))
}

/// Memory registered, released, unmapped and mapped again at the same
/// address with other contents is registered anew, and the peer reads the
/// new contents.
pub(super) fn case_reregistration(c: &mut Ctx) -> Result<Outcome, String> {
    if !gets_offered(c) {
        c.barrier()?;
        return Ok(Outcome::NotApplicable("get not offered".into()));
    }
    let mut map = Mapping::new(None, LEN)?;
    map.fill(&pattern(c.rank, 201, LEN));
    let (first, addr, key) = publish(c, "rereg-1", &map)?;
    let old = first.cache_id();
    let got = get_from_next(c, addr, &key)?.ok_or("the first get was refused")?;
    if got != pattern(c.next, 201, LEN) {
        return Err("the first get read wrong bytes".into());
    }
    c.m.deregister_memory(first)
        .map_err(|e| format!("deregister: {e}"))?;
    c.barrier()?;

    let at = map.addr;
    drop(map);
    let mut map = Mapping::new(Some(at), LEN)?;
    map.fill(&pattern(c.rank, 202, LEN));
    let (second, addr, key) = publish(c, "rereg-2", &map)?;
    if second.cache_id() == old {
        return Err(format!(
            "the cache served the registration of the unmapped memory ({})",
            c.m.memory_monitor()
        ));
    }
    let got = get_from_next(c, addr, &key)?.ok_or("the second get was refused")?;
    if got != pattern(c.next, 202, LEN) {
        return Err("the peer read the old contents after the memory was mapped again".into());
    }
    c.m.deregister_memory(second)
        .map_err(|e| format!("deregister: {e}"))?;
    c.barrier()?;
    Ok(Outcome::Passed)
}

/// A get on the released registration of memory since unmapped fails for
/// the initiator; the target lives and serves a get on memory still
/// registered.
pub(super) fn case_unmapped_get(c: &mut Ctx) -> Result<Outcome, String> {
    if !gets_offered(c) {
        c.barrier()?;
        return Ok(Outcome::NotApplicable("get not offered".into()));
    }
    let mut gone = Mapping::new(None, LEN)?;
    gone.fill(&pattern(c.rank, 211, LEN));
    let mut kept = Mapping::new(None, LEN)?;
    kept.fill(&pattern(c.rank, 212, LEN));
    let (gone_handle, gone_addr, gone_key) = publish(c, "unmapped-gone", &gone)?;
    let (kept_handle, kept_addr, kept_key) = publish(c, "unmapped-kept", &kept)?;
    c.m.deregister_memory(gone_handle)
        .map_err(|e| format!("deregister: {e}"))?;
    // Nothing else may take the address while the peer tries it: an
    // inaccessible mapping replaces the memory (the replacement is an
    // unmapping to the monitor).
    let at = gone.addr;
    drop(gone);
    let _guard = Guard::new(at)?;
    // The monitor's report is applied when this rank next progresses,
    // before it serves anything.
    c.progress()?;
    c.barrier()?;
    if let Some(bytes) = get_from_next(c, gone_addr, &gone_key)? {
        if bytes == pattern(c.next, 211, LEN) {
            return Err("a get read memory the target had unmapped".into());
        }
        return Err("a get on unmapped memory succeeded".into());
    }
    let got = get_from_next(c, kept_addr, &kept_key)?
        .ok_or("the target refused a get on memory still registered")?;
    if got != pattern(c.next, 212, LEN) {
        return Err("the get on memory still registered read wrong bytes".into());
    }
    c.barrier()?;
    c.m.deregister_memory(kept_handle)
        .map_err(|e| format!("deregister: {e}"))?;
    drop(kept);
    Ok(Outcome::Passed)
}

/// An inaccessible mapping holding an address, unmapped on drop.
struct Guard {
    addr: *mut u8,
}

impl Guard {
    #[allow(unsafe_code)]
    fn new(at: *mut u8) -> Result<Self, String> {
        // SAFETY: maps nothing over existing memory (NOREPLACE); the
        // mapping cannot be read or written.
        let addr = unsafe {
            libc::mmap(
                at.cast(),
                LEN,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED || addr != at.cast() {
            return Err(format!(
                "guard mapping: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(Self { addr: at })
    }
}

impl Drop for Guard {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // SAFETY: this value owns the mapping.
        unsafe { libc::munmap(self.addr.cast(), LEN) };
    }
}
