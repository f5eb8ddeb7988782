//! What the processor offers beyond the compilation target's baseline,
//! asked once with CPUID and remembered.
//!
//! The core is `no_std`, so `std::is_x86_feature_detected!` is not there;
//! this module owns the few checks the hot paths need. A build for a target
//! that already has a feature (`-C target-feature=+bmi2`) answers at
//! compile time and never runs CPUID.
#![allow(unsafe_code)]

/// Whether `pdep` (BMI2) and `popcnt` are there and `pdep` is fast.
///
/// AMD processors before Zen 3 (family 0x19), and Hygon's Zen-based ones,
/// run `pdep` in microcode at a cost that grows with the mask's set bits
/// (hundreds of cycles for a full word), slower than doing without it, so
/// they answer no.
#[inline]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) fn has_fast_pdep() -> bool {
    #[cfg(all(
        target_arch = "x86_64",
        target_feature = "bmi2",
        target_feature = "popcnt"
    ))]
    {
        true
    }
    #[cfg(all(
        target_arch = "x86_64",
        not(all(target_feature = "bmi2", target_feature = "popcnt"))
    ))]
    {
        x86::fast_pdep()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use core::arch::x86_64::{__cpuid, __cpuid_count, CpuidResult};
    use core::sync::atomic::{AtomicU8, Ordering};

    const UNKNOWN: u8 = 0;
    const NO: u8 = 1;
    const YES: u8 = 2;

    /// The answer of [`fast_pdep`], once known. Racing first calls all
    /// compute the same answer, so a relaxed store is enough.
    static FAST_PDEP: AtomicU8 = AtomicU8::new(UNKNOWN);

    #[inline]
    pub(super) fn fast_pdep() -> bool {
        match FAST_PDEP.load(Ordering::Relaxed) {
            YES => true,
            NO => false,
            _ => detect(),
        }
    }

    #[cold]
    fn detect() -> bool {
        let yes = probe();
        FAST_PDEP.store(if yes { YES } else { NO }, Ordering::Relaxed);
        yes
    }

    fn cpuid(leaf: u32, sub_leaf: u32) -> CpuidResult {
        // SAFETY: CPUID exists on every x86-64 processor and only reads
        // identification registers; leaves above the maximum answer zeros
        // or the highest leaf's data, and `probe` checks the maximum first.
        #[allow(unused_unsafe)]
        unsafe {
            if sub_leaf == 0 {
                __cpuid(leaf)
            } else {
                __cpuid_count(leaf, sub_leaf)
            }
        }
    }

    fn probe() -> bool {
        let vendor = cpuid(0, 0);
        if vendor.eax < 7 {
            return false;
        }
        let popcnt = cpuid(1, 0).ecx >> 23 & 1 == 1;
        let bmi2 = cpuid(7, 0).ebx >> 8 & 1 == 1;
        if !(popcnt && bmi2) {
            return false;
        }
        // Vendor string in EBX, EDX, ECX: "Auth" "enti" "cAMD", "Hygo"...
        let amd = vendor.ebx == u32::from_le_bytes(*b"Auth")
            || vendor.ebx == u32::from_le_bytes(*b"Hygo");
        if amd {
            let signature = cpuid(1, 0).eax;
            let base = signature >> 8 & 0xF;
            let family = if base == 0xF {
                base + (signature >> 20 & 0xFF)
            } else {
                base
            };
            return family >= 0x19;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn answer_is_stable() {
        let first = super::has_fast_pdep();
        assert_eq!(super::has_fast_pdep(), first);
    }
}
