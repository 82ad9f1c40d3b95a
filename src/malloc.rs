//! One setting of glibc's allocator, made once when the server starts: allocations of 1 MiB or
//! more always get a mapping of their own, returned to the system when freed.
//!
//! glibc otherwise raises its mapping threshold to the size of the largest block freed (up to
//! 32 MiB) and serves later large blocks from the heaps of its per-thread arenas, where they stay.
//! Each Argon2 computation of the dashboard's logins takes a 19 MiB block, aligned to 64 bytes;
//! on the request threads those blocks were kept and fragmented, and the server's resident memory
//! grew by about 1 GB for every 64 logins (2.3 GB after 128), without end. Nothing on the
//! conversions path allocates 1 MiB at once, so its cost there is nil. Other C libraries and
//! platforms keep their defaults. Besides `http/sys.rs`, this is the crate's one `unsafe` call.

/// Makes allocations of 1 MiB or more their own mappings (glibc only; elsewhere nothing).
pub fn unmap_large_allocations() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` only changes a parameter of the allocator; M_MMAP_THRESHOLD with a value
    // under its maximum (32 MiB on 64-bit) is valid, and a refusal (0) leaves the default.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}
