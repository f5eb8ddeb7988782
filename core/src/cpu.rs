//! What the processor offers beyond the compilation target's baseline,
//! asked once with CPUID and remembered: a fast `pdep` (process groups'
//! bitmaps), AVX2 (checksums).
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

/// Whether AVX2 is there and the operating system saves the 256-bit
/// registers across context switches.
#[inline]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) fn has_avx2() -> bool {
    #[cfg(all(target_arch = "x86_64", target_feature = "avx2"))]
    {
        true
    }
    #[cfg(all(target_arch = "x86_64", not(target_feature = "avx2")))]
    {
        x86::avx2()
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

    /// The answer of [`avx2`], once known (as [`FAST_PDEP`]).
    static AVX2: AtomicU8 = AtomicU8::new(UNKNOWN);

    #[inline]
    #[allow(dead_code)] // only asked when the target does not say
    pub(super) fn avx2() -> bool {
        match AVX2.load(Ordering::Relaxed) {
            YES => true,
            NO => false,
            _ => {
                let yes = probe_avx2();
                AVX2.store(if yes { YES } else { NO }, Ordering::Relaxed);
                yes
            }
        }
    }

    fn probe_avx2() -> bool {
        if cpuid(0, 0).eax < 7 {
            return false;
        }
        let ecx = cpuid(1, 0).ecx;
        let (osxsave, avx) = (ecx >> 27 & 1 == 1, ecx >> 28 & 1 == 1);
        if !(osxsave && avx && cpuid(7, 0).ebx >> 5 & 1 == 1) {
            return false;
        }
        let xcr0: u32;
        // SAFETY: XGETBV with ECX = 0 only reads XCR0, and OSXSAVE (checked
        // above) says the instruction is enabled.
        unsafe {
            core::arch::asm!(
                "xgetbv",
                in("ecx") 0,
                out("eax") xcr0,
                out("edx") _,
                options(nomem, nostack, preserves_flags)
            );
        }
        // The SSE and AVX state: the system saves the registers.
        xcr0 & 0b110 == 0b110
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
        let avx2 = super::has_avx2();
        assert_eq!(super::has_avx2(), avx2);
    }
}
