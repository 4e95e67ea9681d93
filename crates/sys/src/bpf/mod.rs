//! bpf(2) calls that aya 0.14 does not make for us, on the file descriptors
//! of programs and maps aya loaded.
