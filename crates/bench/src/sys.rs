//! Process facts the benchmarks report.

/// Page size assumed for `/proc/self/statm` (x86-64 and most aarch64 Linux).
pub const PAGE_BYTES: u64 = 4096;

/// Resident set size of this process in bytes, from `/proc/self/statm`; `None`
/// where that file does not exist (not Linux) or cannot be parsed.
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    parse_statm_resident_bytes(&statm)
}

/// `size resident shared text lib data dt` (in pages) -> resident bytes.
fn parse_statm_resident_bytes(statm: &str) -> Option<u64> {
    let resident_pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    resident_pages.checked_mul(PAGE_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statm_parsing() {
        assert_eq!(
            parse_statm_resident_bytes("1000 250 30 4 0 500 0\n"),
            Some(250 * PAGE_BYTES)
        );
        assert_eq!(parse_statm_resident_bytes("1000"), None);
        assert_eq!(parse_statm_resident_bytes("1000 x"), None);
    }

    #[test]
    fn this_process_has_a_resident_set_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(resident_bytes().is_some_and(|bytes| bytes > 0));
        }
    }
}
