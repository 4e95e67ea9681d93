//! IPVS connection-synchronisation messages, versions 0 and 1, as the Linux
//! kernel's `ip_vs_sync.c` sends and receives them (`ipvsadm --start-daemon
//! master|backup`, keepalived's `lvs_sync_daemon`). A master multicasts the
//! connections it schedules so that a backup director can take them over
//! without breaking established flows. This module is the wire layer only:
//! bytes in, [`SyncMessage`] out, and [`SyncConn`] lists back into
//! datagrams. No I/O, no clock; the daemon owns the sockets and the timers.
//!
//! # Layout
//! ```text
//! v0 header (4 bytes):  nr_conns u8 | syncid u8 | size be16
//! v0 record (24 bytes): reserved u8 | protocol u8 | cport be16 | vport be16 | dport be16
//!                       | caddr 4 | vaddr 4 | daddr 4 | flags be16 | state be16
//!                       then, iff flags has IN_SEQ/OUT_SEQ (0x0600), 24 bytes of
//!                       sequence data in the sender's HOST byte order (see below)
//! v1 header (8 bytes):  reserved=0 u8 | syncid u8 | size be16 | nr_conns u8
//!                       | version=1 u8 | spare=0 be16
//! v1 record:            type u8 (bit 0: IPv6) | protocol u8 | ver_size be16 (4-bit
//!                       record version = 0, 12-bit length incl. options, excl. padding)
//!                       | flags be32 | state be16 | cport | vport | dport be16
//!                       | fwmark be32 | timeout be32 (seconds)
//!                       | caddr | vaddr | daddr (3×4 bytes: 36 in all; 3×16: 72 in all)
//!                       | options: type u8 | length u8 (non-zero) | data
//! ```
//! `size` is the whole datagram. v1 records start 4-byte aligned: the
//! sender pads with zeros *before* the next record, and a receiver steps
//! `(length + 3) & !3` from one record to the next.
//!
//! # What parse does, and where it follows the kernel
//! [`parse`] reproduces `ip_vs_process_message` as a backup runs it:
//! * A bad *header* is an error ([`SyncError`]): fewer than 4 bytes, or a
//!   `size` field that is not the datagram's length. The message is v1 iff it
//!   has the 8-byte header with `version == 1`, `reserved == 0` and
//!   `spare == 0`; anything else is read as v0.
//! * A record the kernel drops on its own (it returns a positive code and the
//!   kernel goes on with the next record): an unknown *mandatory* option, a
//!   protocol the kernel does not know (TCP, UDP, SCTP, AH, ESP are known), a
//!   state number out of range for the protocol (not checked for
//!   templates), PE data without a PE name, a PE name that cannot name an
//!   engine (empty or not UTF-8).
//! * A record malformed so that the kernel abandons the *rest of the
//!   datagram* (negative codes in v1; truncation in v0): fewer than 36 bytes
//!   left for a record, a record length past the end of the datagram, a
//!   record version other than 0, a type byte that is neither IPv4 (0) nor
//!   has the IPv6 bit, a length shorter than the fixed part, an option
//!   header or body that runs past the record, an option of length 0, a
//!   duplicate option, sequence data not 24 bytes long, a PE name over 16
//!   bytes. The records before it were already applied by the kernel and are
//!   returned.
//!
//! [`SyncMessage::skipped`] counts every announced record that is not
//! returned, for either reason. The kernel's *syncid* filter (a backup with
//! a non-zero syncid ignores other syncids) is the caller's job:
//! [`SyncMessage::syncid`] is returned as sent.
//!
//! Values are returned *as on the wire*: flags unmasked (the backup's
//! masking is [`received_flags`]), template states unchecked, protocol 0
//! kept for templates. Unknown optional options (type bit `0x40`) are
//! ignored, as the kernel does; an option type with the `0x40` bit whose
//! low part is a known type (e.g. `0x41`) *is* that option, because the
//! kernel switches on `type & !0x40`. A PE name option without PE data is
//! ignored (the kernel only looks at the name when data came). A PE name is
//! cut at its first NUL byte, as the kernel's C-string lookup does.
//!
//! # Byte order of the v0 sequence block
//! The kernel copies `struct ip_vs_sync_conn_options` into v0 messages with
//! `memcpy`, i.e. in the sending host's byte order; v1 converts to big
//! endian. rvs reads and writes the v0 block as **little endian**, the
//! order of the x86-64 and arm64 kernels every current director runs. A
//! big-endian sender's v0 sequence data would come out byte-swapped, as it
//! does between such kernels.
//!
//! # FULLNAT local address and port (an rvs option)
//! A FULLNAT connection reaches its real server from a (local address,
//! local port) pair the director chose; a backup that takes the connection
//! over must keep that pair, or the real server sees a new 4-tuple
//! mid-connection (DPVS syncs it for this reason). rvs carries it in v1
//! records as an *optional* option, type [`OPT_RVS_LOCAL`] (`0x72`: the
//! optional bit `0x40` with `0x32`, a low part the kernel does not use —
//! it knows 1, 2, 3 and keeps 7 for `IPVS_OPT_PARAM`):
//! ```text
//! type=0x72 u8 | length=6 or 18 u8 | laddr (4 or 16 bytes) | lport be16
//! ```
//! written after the kernel's options. A kernel backup ignores it
//! (`ip_vs_proc_sync_conn`: an unknown option with `IPVS_OPT_F_PARAM` set
//! is skipped) and applies the record. The length says the address's
//! family (it need not be the record's). [`parse`] reads it into
//! [`SyncConn::local`]; one of another length, or a second one, is
//! ignored as a kernel would ignore it (the record is applied; the first
//! well-formed one is kept). v0 has no options: [`build_v0`] drops it.
//!
//! # Timeouts
//! v1 carries the connection's remaining timeout in seconds; 0 means "use the
//! protocol's default for the state" on the receiver (`if (timeout)` in
//! `ip_vs_proc_conn`), exactly what v0 means by sending none. So [`parse`]
//! returns `timeout_s: None` for both v0 and a v1 timeout of 0, and the
//! builders write `None` (and `Some(0)`) as 0.
//!
//! # Bulk resync request (an rvs extension)
//! A director that starts, or becomes master, asks its peers for their
//! whole connection table with a 16-byte datagram sent to the sync group
//! and port ([`build_bulk_request`], [`parse_bulk_request`]):
//! ```text
//! reserved=0 u8 | syncid u8 | size=16 be16 | nr_conns=0 u8
//! | version=0x52 ('R', BULK_REQUEST_VER) u8 | spare=0 be16
//! | magic "rvsB" 4 bytes | nonce be32 (the requester's, for its logs)
//! ```
//! A kernel backup ignores it harmlessly (`ip_vs_process_message` in
//! `net/netfilter/ipvs/ip_vs_sync.c`): the size field matches, so it
//! passes the length checks; the version byte is not `SYNC_PROTO_VER`, so
//! the kernel takes the *v0* path (`ip_vs_process_message_v0`), whose
//! record count is byte 0 — zero here — and so applies nothing and logs
//! nothing. [`parse`] says the same (version 0, no records); older rvs
//! builds therefore ignore it too. An rvs peer answers with its table as
//! ordinary v1 messages to the group (see rvsd's sync module): what a
//! refresh round would send anyway, so kernel backups on the group take
//! it as such.
//!
//! A datagram of the answer can be lost. So that the requester can tell,
//! each record of an answer carries an optional option [`OPT_RVS_BULK`]
//! (`0x73`, ignored by kernel backups like [`OPT_RVS_LOCAL`]):
//! ```text
//! type=0x73 u8 | length=8 u8 | answer be32 | index be32
//! ```
//! and the answer ends with a 20-byte datagram of the request's shape
//! ([`build_bulk_done`], [`parse_bulk_done`]), which kernel backups ignore
//! for the same reason as the request:
//! ```text
//! reserved=0 u8 | syncid u8 | size=20 be16 | nr_conns=0 u8
//! | version=0x52 u8 | spare=0 be16
//! | magic "rvsD" 4 bytes | answer be32 | entries be32
//! ```
//! A requester that misses an index below `entries` (or the end) asks
//! again.
//!
//! # No-panic contract
//! [`parse`], [`parse_bulk_request`], [`parse_bulk_done`], [`build_v1`] and [`build_v0`] return
//! errors (or `None`) for every input,
//! never panic; fuzzed by `fuzz/fuzz_targets/ipvs_sync.rs`, which also checks
//! that every parsed message rebuilds as v1 into datagrams that parse back
//! to the same connections.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

#[cfg(test)]
mod tests;

/// UDP port the sync daemon multicasts to (`IP_VS_SYNC_PORT`); with
/// `sync_ports` n > 1, threads use 8848..8848+n-1.
pub const SYNC_PORT: u16 = 8848;

/// IPv4 multicast group of the sync daemon (`IP_VS_SYNC_GROUP`, 224.0.0.81).
pub const SYNC_GROUP_V4: Ipv4Addr = Ipv4Addr::new(224, 0, 0, 81);

/// Version number a v1 header carries (`SYNC_PROTO_VER`).
pub const SYNC_PROTO_VER: u8 = 1;

/// Length of the v0 message header.
pub const V0_HEADER_LEN: usize = 4;
/// Length of the v1 message header.
pub const V1_HEADER_LEN: usize = 8;
/// Length of a v0 connection record without its sequence block.
pub const V0_CONN_LEN: usize = 24;
/// Length of the v0 sequence block (in_seq, out_seq: 3 × u32 each).
pub const V0_SEQ_LEN: usize = 24;
/// Length of a v1 IPv4 record's fixed part (`struct ip_vs_sync_v4`).
pub const V1_CONN_V4_LEN: usize = 36;
/// Length of a v1 IPv6 record's fixed part (`struct ip_vs_sync_v6`).
pub const V1_CONN_V6_LEN: usize = 72;

/// v1 record type bit: the record carries IPv6 addresses (`STYPE_F_INET6`).
pub const STYPE_F_INET6: u8 = 0x01;

/// v1 option: TCP sequence-adjustment data, 24 bytes (in_seq then out_seq).
pub const OPT_SEQ_DATA: u8 = 1;
/// v1 option: persistence-engine data (e.g. the SIP Call-ID), ≤ 255 bytes.
pub const OPT_PE_DATA: u8 = 2;
/// v1 option: persistence-engine name (e.g. `sip`), ≤ 16 bytes.
pub const OPT_PE_NAME: u8 = 3;
/// v1 option (an rvs extension, optional: kernel backups ignore it): the
/// FULLNAT local address and port of the connection (see the module
/// documentation).
pub const OPT_RVS_LOCAL: u8 = OPT_F_OPTIONAL | 0x32;
/// v1 option (an rvs extension, optional: kernel backups ignore it): the
/// record is entry `index` of bulk answer `answer` (see the module
/// documentation, "Bulk resync").
pub const OPT_RVS_BULK: u8 = OPT_F_OPTIONAL | 0x33;
/// Length of the [`OPT_RVS_BULK`] option's data: answer and index, be32 each.
const BULK_MARK_LEN: usize = 8;
/// v1 option type bit marking an option the receiver may ignore when it
/// does not know it (`IPVS_OPT_F_PARAM` = 1 << (`IPVS_OPT_PARAM` 7 − 1)).
/// An unknown option without it is mandatory: the record is dropped.
pub const OPT_F_OPTIONAL: u8 = 0x40;

/// Version byte of an rvs bulk-resync request ('R'): anything but
/// [`SYNC_PROTO_VER`] sends a kernel backup down its v0 path, where the
/// request's zero first byte is a record count of zero.
pub const BULK_REQUEST_VER: u8 = 0x52;
/// Magic after the header of a bulk-resync request.
pub const BULK_REQUEST_MAGIC: [u8; 4] = *b"rvsB";
/// Length of a bulk-resync request.
pub const BULK_REQUEST_LEN: usize = 16;
/// Magic after the header of the end of a bulk answer.
pub const BULK_DONE_MAGIC: [u8; 4] = *b"rvsD";
/// Length of the end of a bulk answer.
pub const BULK_DONE_LEN: usize = 20;

/// Longest persistence-engine name (`IP_VS_PENAME_MAXLEN`).
pub const PE_NAME_MAXLEN: usize = 16;
/// Longest persistence-engine data (`IP_VS_PEDATA_MAXLEN`).
pub const PE_DATA_MAXLEN: usize = 255;

/// Largest record length the 12-bit `ver_size` field can describe.
pub const V1_RECORD_MAXLEN: usize = 0x0fff;

/// Forwarding-method bits of the connection flags (`IP_VS_CONN_F_FWD_MASK`).
pub const FLAG_FWD_MASK: u32 = 0x0007;
/// Forwarding method: NAT / masquerading (`IP_VS_CONN_F_MASQ`).
pub const FWD_MASQ: u32 = 0x0000;
/// Forwarding method: local node (`IP_VS_CONN_F_LOCALNODE`).
pub const FWD_LOCALNODE: u32 = 0x0001;
/// Forwarding method: IP-in-IP tunnelling (`IP_VS_CONN_F_TUNNEL`).
pub const FWD_TUNNEL: u32 = 0x0002;
/// Forwarding method: direct routing (`IP_VS_CONN_F_DROUTE`).
pub const FWD_DROUTE: u32 = 0x0003;
/// Forwarding method: cache bypass (`IP_VS_CONN_F_BYPASS`).
pub const FWD_BYPASS: u32 = 0x0004;
/// The connection was created by sync (`IP_VS_CONN_F_SYNC`); a backup adds it
/// to every received connection.
pub const FLAG_SYNC: u32 = 0x0020;
/// Hashed into the connection table (`IP_VS_CONN_F_HASHED`); the kernel
/// clears it before sending.
pub const FLAG_HASHED: u32 = 0x0040;
/// No output packets seen yet (`IP_VS_CONN_F_NOOUTPUT`).
pub const FLAG_NOOUTPUT: u32 = 0x0080;
/// Not established: counted in the destination's inactive connections
/// (`IP_VS_CONN_F_INACTIVE`).
pub const FLAG_INACTIVE: u32 = 0x0100;
/// Output sequence numbers must be adjusted (`IP_VS_CONN_F_OUT_SEQ`).
pub const FLAG_OUT_SEQ: u32 = 0x0200;
/// Input sequence numbers must be adjusted (`IP_VS_CONN_F_IN_SEQ`).
pub const FLAG_IN_SEQ: u32 = 0x0400;
/// Both sequence-adjustment bits (`IP_VS_CONN_F_SEQ_MASK`); in v0 they say
/// whether the 24-byte sequence block follows the record.
pub const FLAG_SEQ_MASK: u32 = 0x0600;
/// The client port is not known yet (`IP_VS_CONN_F_NO_CPORT`), e.g. FTP data.
pub const FLAG_NO_CPORT: u32 = 0x0800;
/// A persistence template, not a connection (`IP_VS_CONN_F_TEMPLATE`).
pub const FLAG_TEMPLATE: u32 = 0x1000;
/// Forward only one packet (`IP_VS_CONN_F_ONE_PACKET`); never synced.
pub const FLAG_ONE_PACKET: u32 = 0x2000;

/// A template's state when a connection it controls was established
/// (`IP_VS_CTPL_S_ASSURED`; `ipvsadm -Lcn` lists it as `ASSURED`): the
/// kernel keeps such a template until its own timer ends, while a template
/// still in state 0 (`NONE`) goes with its last connection.
pub const TPL_STATE_ASSURED: u16 = 0x0001;

/// The connection flags the kernel defines in a record (forwarding method,
/// NOOUTPUT, INACTIVE, the sequence bits, NO_CPORT, TEMPLATE, ONE_PACKET):
/// what an rvs master may put on the wire, never its own bits above them.
pub const KERNEL_FLAGS: u32 = FLAG_FWD_MASK
    | FLAG_NOOUTPUT
    | FLAG_INACTIVE
    | FLAG_SEQ_MASK
    | FLAG_NO_CPORT
    | FLAG_TEMPLATE
    | FLAG_ONE_PACKET;

/// The flags a backup keeps from a v1 record (`IP_VS_CONN_F_BACKUP_MASK`):
/// FWD_MASK | NOOUTPUT | INACTIVE | SEQ_MASK | NO_CPORT | TEMPLATE.
pub const BACKUP_MASK: u32 =
    FLAG_FWD_MASK | FLAG_NOOUTPUT | FLAG_INACTIVE | FLAG_SEQ_MASK | FLAG_NO_CPORT | FLAG_TEMPLATE;

/// The flags a backup updates on a connection it already has
/// (`IP_VS_CONN_F_BACKUP_UPD_MASK`): INACTIVE | SEQ_MASK.
pub const BACKUP_UPD_MASK: u32 = FLAG_INACTIVE | FLAG_SEQ_MASK;

/// IP protocol number of TCP.
pub const IPPROTO_TCP: u8 = 6;
/// IP protocol number of UDP.
pub const IPPROTO_UDP: u8 = 17;
/// IP protocol number of SCTP.
pub const IPPROTO_SCTP: u8 = 132;
/// IP protocol number of ESP (IPVS knows it with a single state).
pub const IPPROTO_ESP: u8 = 50;
/// IP protocol number of AH (IPVS knows it with a single state).
pub const IPPROTO_AH: u8 = 51;

/// How many states the kernel's IPVS protocol `protocol` has
/// (`pp->num_states`), or `None` if IPVS does not know the protocol. A
/// non-template record whose state is not below this is dropped by a backup.
/// TCP: 11 (NONE..SYNACK), UDP: 1, SCTP: 14 (NONE..CLOSED), AH/ESP: 1.
pub fn num_states(protocol: u8) -> Option<u16> {
    match protocol {
        IPPROTO_TCP => Some(11),
        IPPROTO_UDP => Some(1),
        IPPROTO_SCTP => Some(14),
        IPPROTO_AH | IPPROTO_ESP => Some(1),
        _ => None,
    }
}

/// The flags a kernel backup gives a connection it learns from a record
/// with `wire` flags, in a message of `version`: v1 keeps [`BACKUP_MASK`],
/// v0 keeps everything but [`FLAG_HASHED`] (`ip_vs_process_message_v0` does
/// not apply the mask); both add [`FLAG_SYNC`].
pub fn received_flags(version: u8, wire: u32) -> u32 {
    if version == 0 {
        (wire | FLAG_SYNC) & !FLAG_HASHED
    } else {
        (wire & BACKUP_MASK) | FLAG_SYNC
    }
}

/// TCP sequence-adjustment state of one direction (`struct ip_vs_seq`) is
/// three u32: initial sequence number, delta, previous delta. This is both
/// directions, as the sync option carries them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SeqData {
    /// Client→server direction: `[init_seq, delta, previous_delta]`.
    pub in_seq: [u32; 3],
    /// Server→client direction: `[init_seq, delta, previous_delta]`.
    pub out_seq: [u32; 3],
}

/// One synced connection (or persistence template), owned. Fields hold the
/// values as on the wire; see the module documentation for how a backup
/// interprets them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncConn {
    /// IP protocol (`IPPROTO_TCP`/`UDP`/`SCTP`...), or whatever a template
    /// carries (0 for some), kept as is.
    pub protocol: u8,
    /// Client address and port (`caddr:cport`).
    pub client: SocketAddr,
    /// Virtual service address and port (`vaddr:vport`).
    pub vip: SocketAddr,
    /// Real server address and port (`daddr:dport`).
    pub dest: SocketAddr,
    /// Connection flags as on the wire (v0: only the low 16 bits exist).
    pub flags: u32,
    /// Protocol state number (see IPVS.md §2), 0 for templates normally.
    pub state: u16,
    /// Firewall mark of the virtual service (v1 only; 0 in v0).
    pub fwmark: u32,
    /// v1: remaining timeout in seconds; `None` (v0, or 0 on the wire in v1):
    /// the receiver uses the protocol's default for the state (templates:
    /// 180 s).
    pub timeout_s: Option<u32>,
    /// IN_SEQ/OUT_SEQ data when present (v0 block / v1 option 1).
    pub seq: Option<SeqData>,
    /// Persistence-engine name (v1 option 3), present only with `pe_data`.
    pub pe_name: Option<String>,
    /// Persistence-engine data (v1 option 2), present only with `pe_name`.
    pub pe_data: Option<Vec<u8>>,
    /// FULLNAT local address and port (v1 rvs option [`OPT_RVS_LOCAL`];
    /// `None` in v0 and from senders that do not write it).
    pub local: Option<SocketAddr>,
    /// Which bulk answer this record belongs to, and its place in it (v1
    /// rvs option [`OPT_RVS_BULK`]; `None` outside bulk answers, in v0 and
    /// from senders that do not write it).
    pub bulk: Option<BulkMark>,
}

/// A record's place in a bulk answer: the requester checks that it got
/// every index below the answer's [`BulkDone::entries`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BulkMark {
    /// The answer (a number the answering daemon picks per walk).
    pub answer: u32,
    /// The record's index in the answer, from 0.
    pub index: u32,
}

impl SyncConn {
    /// Whether this is a persistence template rather than a connection.
    pub fn is_template(&self) -> bool {
        self.flags & FLAG_TEMPLATE != 0
    }

    /// Length of this connection's v1 record without padding, if all three
    /// addresses are of one family.
    pub fn v1_len(&self) -> Option<usize> {
        let fixed = match (self.client, self.vip, self.dest) {
            (SocketAddr::V4(_), SocketAddr::V4(_), SocketAddr::V4(_)) => V1_CONN_V4_LEN,
            (SocketAddr::V6(_), SocketAddr::V6(_), SocketAddr::V6(_)) => V1_CONN_V6_LEN,
            _ => return None,
        };
        let seq = if self.seq.is_some() {
            2 + V0_SEQ_LEN
        } else {
            0
        };
        let data = self.pe_data.as_ref().map_or(0, |d| 2 + d.len());
        let name = self.pe_name.as_ref().map_or(0, |n| 2 + n.len());
        let local = self.local.map_or(0, |l| 2 + local_len(&l));
        let bulk = if self.bulk.is_some() {
            2 + BULK_MARK_LEN
        } else {
            0
        };
        Some(fixed + seq + data + name + local + bulk)
    }
}

/// A parsed sync datagram.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncMessage {
    /// Message format: 0 or 1.
    pub version: u8,
    /// Sync ID of the sender; a backup with a non-zero syncid ignores
    /// messages of other syncids (the caller's check).
    pub syncid: u8,
    /// The records the kernel would apply, in datagram order.
    pub conns: Vec<SyncConn>,
    /// Records announced by the header's `nr_conns` that are not in `conns`:
    /// dropped by a record rule, or never reached because a malformed
    /// record ended the datagram (see the module documentation).
    pub skipped: usize,
}

/// An rvs bulk-resync request: "send me your whole table" (see the module
/// documentation for the layout and why kernel peers ignore it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BulkRequest {
    /// Sync ID of the requester; a peer answers requests of its own syncid
    /// (or any, when its syncid is 0).
    pub syncid: u8,
    /// A number the requester chose (it logs it; answers do not carry it).
    pub nonce: u32,
}

/// The datagram of a bulk-resync request.
pub fn build_bulk_request(req: &BulkRequest) -> [u8; BULK_REQUEST_LEN] {
    let mut b = [0u8; BULK_REQUEST_LEN];
    b[1] = req.syncid;
    b[2..4].copy_from_slice(&(BULK_REQUEST_LEN as u16).to_be_bytes());
    b[5] = BULK_REQUEST_VER;
    b[8..12].copy_from_slice(&BULK_REQUEST_MAGIC);
    b[12..16].copy_from_slice(&req.nonce.to_be_bytes());
    b
}

/// The bulk-resync request `buf` is, or `None` when it is not exactly one
/// (any other length, size field, version, magic, or a non-zero reserved,
/// count or spare field).
pub fn parse_bulk_request(buf: &[u8]) -> Option<BulkRequest> {
    let b: &[u8; BULK_REQUEST_LEN] = buf.try_into().ok()?;
    if !rvs_header_ok(b, BULK_REQUEST_LEN) || b[8..12] != BULK_REQUEST_MAGIC {
        return None;
    }
    Some(BulkRequest {
        syncid: b[1],
        nonce: be32(b, 12)?,
    })
}

/// The end of a bulk answer: how many records it had (see the module
/// documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BulkDone {
    /// Sync ID of the answering daemon.
    pub syncid: u8,
    /// The answer ([`BulkMark::answer`] of its records).
    pub answer: u32,
    /// How many records it had: indices `0..entries`.
    pub entries: u32,
}

/// The datagram that ends a bulk answer.
pub fn build_bulk_done(done: &BulkDone) -> [u8; BULK_DONE_LEN] {
    let mut b = [0u8; BULK_DONE_LEN];
    b[1] = done.syncid;
    b[2..4].copy_from_slice(&(BULK_DONE_LEN as u16).to_be_bytes());
    b[5] = BULK_REQUEST_VER;
    b[8..12].copy_from_slice(&BULK_DONE_MAGIC);
    b[12..16].copy_from_slice(&done.answer.to_be_bytes());
    b[16..20].copy_from_slice(&done.entries.to_be_bytes());
    b
}

/// The end of a bulk answer `buf` is, or `None` when it is not exactly one
/// (the same checks as [`parse_bulk_request`]).
pub fn parse_bulk_done(buf: &[u8]) -> Option<BulkDone> {
    let b: &[u8; BULK_DONE_LEN] = buf.try_into().ok()?;
    if !rvs_header_ok(b, BULK_DONE_LEN) || b[8..12] != BULK_DONE_MAGIC {
        return None;
    }
    Some(BulkDone {
        syncid: b[1],
        answer: be32(b, 12)?,
        entries: be32(b, 16)?,
    })
}

/// The header of an rvs extension datagram of `len` bytes: zero reserved,
/// count and spare, the size field right, version [`BULK_REQUEST_VER`].
fn rvs_header_ok(b: &[u8], len: usize) -> bool {
    b.len() == len
        && b[0] == 0
        && be16(b, 2) == u16::try_from(len).ok()
        && b[4] == 0
        && b[5] == BULK_REQUEST_VER
        && b[6] == 0
        && b[7] == 0
}

/// Why bytes are not a sync message, or connections cannot be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SyncError {
    /// Fewer than 4 bytes: not even a v0 header.
    #[error("IPVS sync message too short: {0} bytes, the header needs 4")]
    TooShort(usize),
    /// The header's `size` is not the datagram's length.
    #[error("IPVS sync message size field {field} differs from the datagram length {actual}")]
    SizeMismatch {
        /// The `size` field.
        field: u16,
        /// Bytes received.
        actual: usize,
    },
    /// A connection's client, virtual and destination addresses are not all
    /// of one family (a record has a single family).
    #[error(
        "IPVS sync conn #{index}: client, virtual and destination addresses of different families"
    )]
    MixedFamily {
        /// Position in the list given to the builder.
        index: usize,
    },
    /// v0 carries IPv4 only.
    #[error("IPVS sync conn #{index}: IPv6 cannot be sent in a version 0 message")]
    Ipv6InV0 {
        /// Position in the list given to the builder.
        index: usize,
    },
    /// PE name and PE data go together (the receiver drops data without a
    /// name and ignores a name without data).
    #[error(
        "IPVS sync conn #{index}: persistence-engine name and data must be both present or both absent"
    )]
    PeIncomplete {
        /// Position in the list given to the builder.
        index: usize,
    },
    /// The PE name is empty, longer than [`PE_NAME_MAXLEN`] bytes or holds a
    /// NUL byte.
    #[error("IPVS sync conn #{index}: persistence-engine name must be 1..=16 bytes without NUL")]
    BadPeName {
        /// Position in the list given to the builder.
        index: usize,
    },
    /// The PE data is empty or longer than [`PE_DATA_MAXLEN`] bytes.
    #[error("IPVS sync conn #{index}: persistence-engine data is {len} bytes, must be 1..=255")]
    BadPeData {
        /// Position in the list given to the builder.
        index: usize,
        /// Length given.
        len: usize,
    },
    /// One connection does not fit into a datagram of `maxlen` bytes even
    /// alone (with the message header).
    #[error("IPVS sync conn #{index} needs a {needed}-byte datagram, the limit is {maxlen}")]
    ConnTooLarge {
        /// Position in the list given to the builder.
        index: usize,
        /// Header plus record length.
        needed: usize,
        /// The limit given (capped at 65535).
        maxlen: usize,
    },
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    let s = b.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([s[0], s[1]]))
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

fn le32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn ipv4(b: &[u8], at: usize) -> Option<IpAddr> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(IpAddr::V4(Ipv4Addr::new(s[0], s[1], s[2], s[3])))
}

fn ipv6(b: &[u8], at: usize) -> Option<IpAddr> {
    let s: [u8; 16] = b.get(at..at.checked_add(16)?)?.try_into().ok()?;
    Some(IpAddr::V6(Ipv6Addr::from(s)))
}

/// Three u32 read with `read` from `b` at `at`, `at + 4`, `at + 8`.
fn triple(b: &[u8], at: usize, read: fn(&[u8], usize) -> Option<u32>) -> Option<[u32; 3]> {
    Some([read(b, at)?, read(b, at + 4)?, read(b, at + 8)?])
}

/// Length of the [`OPT_RVS_LOCAL`] option's data for `local`.
fn local_len(local: &SocketAddr) -> usize {
    match local {
        SocketAddr::V4(_) => 4 + 2,
        SocketAddr::V6(_) => 16 + 2,
    }
}

/// The [`OPT_RVS_LOCAL`] option's data, or `None` when its length is
/// neither 6 nor 18.
fn parse_local(data: &[u8]) -> Option<SocketAddr> {
    match data.len() {
        6 => Some(SocketAddr::new(ipv4(data, 0)?, be16(data, 4)?)),
        18 => Some(SocketAddr::new(ipv6(data, 0)?, be16(data, 16)?)),
        _ => None,
    }
}

/// What became of one record.
#[expect(
    clippy::large_enum_variant,
    reason = "returned once per record and moved into the list: a box would cost an allocation per record"
)]
enum Outcome {
    /// Applied: here it is.
    Conn(SyncConn),
    /// Dropped on its own; go on with the next record.
    Skip,
    /// Malformed: the kernel drops the rest of the datagram.
    Abort,
}

/// Whether a non-template record's protocol and state pass the backup's
/// checks (`ip_vs_proto_get`, `state < pp->num_states`).
fn state_ok(flags: u32, protocol: u8, state: u16) -> bool {
    if flags & FLAG_TEMPLATE != 0 {
        return true;
    }
    num_states(protocol).is_some_and(|n| state < n)
}

/// Parses one sync datagram (the UDP payload) as a kernel backup does; see
/// the module documentation for the rules.
pub fn parse(buf: &[u8]) -> Result<SyncMessage, SyncError> {
    if buf.len() < V0_HEADER_LEN {
        return Err(SyncError::TooShort(buf.len()));
    }
    let field = u16::from_be_bytes([buf[2], buf[3]]);
    if usize::from(field) != buf.len() {
        return Err(SyncError::SizeMismatch {
            field,
            actual: buf.len(),
        });
    }
    let syncid = buf[1];
    let v1 = buf.len() >= V1_HEADER_LEN
        && buf[0] == 0
        && buf[5] == SYNC_PROTO_VER
        && buf[6] == 0
        && buf[7] == 0;
    let (version, nr_conns, conns) = if v1 {
        (1, usize::from(buf[4]), parse_v1_records(buf, buf[4]))
    } else {
        (0, usize::from(buf[0]), parse_v0_records(buf, buf[0]))
    };
    Ok(SyncMessage {
        version,
        syncid,
        skipped: nr_conns.saturating_sub(conns.len()),
        conns,
    })
}

fn parse_v0_records(buf: &[u8], nr_conns: u8) -> Vec<SyncConn> {
    let mut conns = Vec::new();
    let mut p = V0_HEADER_LEN;
    for _ in 0..nr_conns {
        match parse_v0_record(buf, &mut p) {
            Outcome::Conn(c) => conns.push(c),
            Outcome::Skip => {}
            Outcome::Abort => break,
        }
    }
    conns
}

/// One v0 record at `*p`; advances `*p` past it (and its sequence block).
fn parse_v0_record(buf: &[u8], p: &mut usize) -> Outcome {
    let at = *p;
    let Some(rec) = buf.get(at..at + V0_CONN_LEN) else {
        return Outcome::Abort;
    };
    let field16 = |o: usize| u16::from_be_bytes([rec[o], rec[o + 1]]);
    let flags = u32::from(field16(20));
    let state = field16(22);
    let seq = if flags & FLAG_SEQ_MASK != 0 {
        let s = at + V0_CONN_LEN;
        match (triple(buf, s, le32), triple(buf, s + 12, le32)) {
            (Some(in_seq), Some(out_seq)) => Some(SeqData { in_seq, out_seq }),
            _ => return Outcome::Abort,
        }
    } else {
        None
    };
    *p = at + V0_CONN_LEN + if seq.is_some() { V0_SEQ_LEN } else { 0 };
    let protocol = rec[1];
    if !state_ok(flags, protocol, state) {
        return Outcome::Skip;
    }
    let addr = |o: usize| IpAddr::V4(Ipv4Addr::new(rec[o], rec[o + 1], rec[o + 2], rec[o + 3]));
    Outcome::Conn(SyncConn {
        protocol,
        client: SocketAddr::new(addr(8), field16(2)),
        vip: SocketAddr::new(addr(12), field16(4)),
        dest: SocketAddr::new(addr(16), field16(6)),
        flags,
        state,
        fwmark: 0,
        timeout_s: None,
        seq,
        pe_name: None,
        pe_data: None,
        local: None,
        bulk: None,
    })
}

fn parse_v1_records(buf: &[u8], nr_conns: u8) -> Vec<SyncConn> {
    let mut conns = Vec::new();
    let mut p = V1_HEADER_LEN;
    for _ in 0..nr_conns {
        // Not enough for even an IPv4 record (the kernel checks the IPv4
        // size whatever the type), a length past the datagram or a record
        // version other than 0: the rest of the datagram is dropped.
        if p + V1_CONN_V4_LEN > buf.len() {
            break;
        }
        let Some(ver_size) = be16(buf, p + 2) else {
            break;
        };
        let size = usize::from(ver_size) & V1_RECORD_MAXLEN;
        let end = p + size;
        if end > buf.len() || ver_size >> 12 != 0 {
            break;
        }
        match parse_v1_record(&buf[p..end]) {
            Outcome::Conn(c) => conns.push(c),
            Outcome::Skip => {}
            Outcome::Abort => break,
        }
        p += (size + 3) & !3;
    }
    conns
}

/// One v1 record, `rec` exactly its announced length.
fn parse_v1_record(rec: &[u8]) -> Outcome {
    let ty = rec.first().copied().unwrap_or(0);
    let ipv6_rec = ty & STYPE_F_INET6 != 0;
    let fixed = if ipv6_rec {
        V1_CONN_V6_LEN
    } else if ty == 0 {
        V1_CONN_V4_LEN
    } else {
        return Outcome::Abort;
    };
    if rec.len() < fixed {
        return Outcome::Abort;
    }
    let mut seq = None;
    let mut pe_data: Option<&[u8]> = None;
    let mut pe_name: Option<&[u8]> = None;
    let mut local: Option<SocketAddr> = None;
    let mut bulk: Option<BulkMark> = None;
    let mut q = fixed;
    while q < rec.len() {
        let (Some(&ptype), Some(&plen)) = (rec.get(q), rec.get(q + 1)) else {
            return Outcome::Abort;
        };
        let plen = usize::from(plen);
        q += 2;
        let Some(data) = rec.get(q..q + plen).filter(|d| !d.is_empty()) else {
            return Outcome::Abort;
        };
        // rvs's own option (optional: a malformed or second one is ignored,
        // as a kernel ignores it).
        if ptype == OPT_RVS_LOCAL {
            if local.is_none() {
                local = parse_local(data);
            }
            q += plen;
            continue;
        }
        if ptype == OPT_RVS_BULK {
            if bulk.is_none()
                && data.len() == BULK_MARK_LEN
                && let (Some(answer), Some(index)) = (be32(data, 0), be32(data, 4))
            {
                bulk = Some(BulkMark { answer, index });
            }
            q += plen;
            continue;
        }
        match ptype & !OPT_F_OPTIONAL {
            OPT_SEQ_DATA => {
                if plen != V0_SEQ_LEN || seq.is_some() {
                    return Outcome::Abort;
                }
                match (triple(data, 0, be32), triple(data, 12, be32)) {
                    (Some(in_seq), Some(out_seq)) => seq = Some(SeqData { in_seq, out_seq }),
                    _ => return Outcome::Abort,
                }
            }
            OPT_PE_DATA => {
                // plen ≤ 255 = PE_DATA_MAXLEN always.
                if pe_data.is_some() {
                    return Outcome::Abort;
                }
                pe_data = Some(data);
            }
            OPT_PE_NAME => {
                if plen > PE_NAME_MAXLEN || pe_name.is_some() {
                    return Outcome::Abort;
                }
                pe_name = Some(data);
            }
            _ if ptype & OPT_F_OPTIONAL == 0 => return Outcome::Skip,
            _ => {}
        }
        q += plen;
    }
    let (Some(flags), Some(state), Some(fwmark), Some(timeout)) =
        (be32(rec, 4), be16(rec, 8), be32(rec, 16), be32(rec, 20))
    else {
        return Outcome::Abort;
    };
    let protocol = rec[1];
    if !state_ok(flags, protocol, state) {
        return Outcome::Skip;
    }
    let (pe_name, pe_data) = match pe_data {
        None => (None, None),
        Some(data) => {
            let Some(raw) = pe_name else {
                return Outcome::Skip;
            };
            let raw = raw.split(|&b| b == 0).next().unwrap_or_default();
            match std::str::from_utf8(raw) {
                Ok(name) if !name.is_empty() => (Some(name.to_owned()), Some(data.to_vec())),
                _ => return Outcome::Skip,
            }
        }
    };
    let addrs = if ipv6_rec {
        (ipv6(rec, 24), ipv6(rec, 40), ipv6(rec, 56))
    } else {
        (ipv4(rec, 24), ipv4(rec, 28), ipv4(rec, 32))
    };
    let (Some(c), Some(v), Some(d), Some(cport), Some(vport), Some(dport)) = (
        addrs.0,
        addrs.1,
        addrs.2,
        be16(rec, 10),
        be16(rec, 12),
        be16(rec, 14),
    ) else {
        return Outcome::Abort;
    };
    Outcome::Conn(SyncConn {
        protocol,
        client: SocketAddr::new(c, cport),
        vip: SocketAddr::new(v, vport),
        dest: SocketAddr::new(d, dport),
        flags,
        state,
        fwmark,
        timeout_s: (timeout != 0).then_some(timeout),
        seq,
        pe_name,
        pe_data,
        local,
        bulk,
    })
}

/// Where the header fields a packed datagram fills in at the end live.
struct HeaderLayout {
    /// The header with zero count and size.
    template: Vec<u8>,
    /// Offset of the `nr_conns` byte.
    count_at: usize,
}

/// Packs records (encoded by `encode`) into datagrams of at most `maxlen`
/// bytes, at most 255 records each, each record starting `align`-aligned
/// (zero padding inserted before it, never after the last).
fn pack<F>(
    conns: &[SyncConn],
    maxlen: usize,
    header: &HeaderLayout,
    align: usize,
    mut encode: F,
) -> Result<Vec<Vec<u8>>, SyncError>
where
    F: FnMut(usize, &SyncConn, &mut Vec<u8>) -> Result<(), SyncError>,
{
    let maxlen = maxlen.min(usize::from(u16::MAX));
    let finish = |mut dgram: Vec<u8>, count: u8| {
        dgram[header.count_at] = count;
        // dgram.len() ≤ maxlen ≤ 65535.
        let size = u16::try_from(dgram.len()).unwrap_or(u16::MAX);
        dgram[2..4].copy_from_slice(&size.to_be_bytes());
        dgram
    };
    let mut out = Vec::new();
    let mut cur = header.template.clone();
    let mut count: u8 = 0;
    let mut rec = Vec::new();
    for (index, conn) in conns.iter().enumerate() {
        rec.clear();
        encode(index, conn, &mut rec)?;
        let needed = header.template.len() + rec.len();
        if needed > maxlen {
            return Err(SyncError::ConnTooLarge {
                index,
                needed,
                maxlen,
            });
        }
        let pad = (align - cur.len() % align) % align;
        if count == u8::MAX || cur.len() + pad + rec.len() > maxlen {
            out.push(finish(cur, count));
            cur = header.template.clone();
            count = 0;
        }
        let pad = (align - cur.len() % align) % align;
        cur.resize(cur.len() + pad, 0);
        cur.extend_from_slice(&rec);
        count += 1;
    }
    if count > 0 {
        out.push(finish(cur, count));
    }
    Ok(out)
}

/// Packs `conns` into v1 datagrams of at most `maxlen` bytes each (capped at
/// 65535; the kernel's default is 1472 for IPv4): the 8-byte header, then
/// records 4-byte aligned, zero padding inserted *before* the next record
/// as the kernel does (so no padding after the last), at most 255 records
/// per datagram (`nr_conns` is one byte). Options are written in the
/// kernel's order: sequence data (when `seq` is `Some`), PE data, PE name;
/// then rvs's [`OPT_RVS_LOCAL`] when `local` is `Some` and
/// [`OPT_RVS_BULK`] when `bulk` is `Some`.
/// Connections are not checked against the receive rules (protocol, state):
/// the builder writes what it is given. An empty list gives no datagrams.
///
/// Errors: a connection mixing address families, with only one of PE name
/// and data, with a bad PE name or data length ([`SyncError`]), or one that
/// does not fit into `maxlen` even alone.
pub fn build_v1(syncid: u8, conns: &[SyncConn], maxlen: usize) -> Result<Vec<Vec<u8>>, SyncError> {
    let header = HeaderLayout {
        template: vec![0, syncid, 0, 0, 0, SYNC_PROTO_VER, 0, 0],
        count_at: 4,
    };
    pack(conns, maxlen, &header, 4, encode_v1)
}

fn encode_v1(index: usize, c: &SyncConn, rec: &mut Vec<u8>) -> Result<(), SyncError> {
    let ipv6 = match (c.client.ip(), c.vip.ip(), c.dest.ip()) {
        (IpAddr::V4(_), IpAddr::V4(_), IpAddr::V4(_)) => false,
        (IpAddr::V6(_), IpAddr::V6(_), IpAddr::V6(_)) => true,
        _ => return Err(SyncError::MixedFamily { index }),
    };
    let pe = match (&c.pe_name, &c.pe_data) {
        (None, None) => None,
        (Some(name), Some(data)) => {
            if name.is_empty() || name.len() > PE_NAME_MAXLEN || name.contains('\0') {
                return Err(SyncError::BadPeName { index });
            }
            if data.is_empty() || data.len() > PE_DATA_MAXLEN {
                return Err(SyncError::BadPeData {
                    index,
                    len: data.len(),
                });
            }
            Some((name.as_bytes(), data.as_slice()))
        }
        _ => return Err(SyncError::PeIncomplete { index }),
    };
    rec.push(if ipv6 { STYPE_F_INET6 } else { 0 });
    rec.push(c.protocol);
    rec.extend_from_slice(&[0, 0]); // ver_size, filled in below
    rec.extend_from_slice(&c.flags.to_be_bytes());
    rec.extend_from_slice(&c.state.to_be_bytes());
    rec.extend_from_slice(&c.client.port().to_be_bytes());
    rec.extend_from_slice(&c.vip.port().to_be_bytes());
    rec.extend_from_slice(&c.dest.port().to_be_bytes());
    rec.extend_from_slice(&c.fwmark.to_be_bytes());
    rec.extend_from_slice(&c.timeout_s.unwrap_or(0).to_be_bytes());
    for addr in [c.client.ip(), c.vip.ip(), c.dest.ip()] {
        match addr {
            IpAddr::V4(a) => rec.extend_from_slice(&a.octets()),
            IpAddr::V6(a) => rec.extend_from_slice(&a.octets()),
        }
    }
    if let Some(seq) = &c.seq {
        rec.extend_from_slice(&[OPT_SEQ_DATA, V0_SEQ_LEN as u8]);
        for v in seq.in_seq.iter().chain(&seq.out_seq) {
            rec.extend_from_slice(&v.to_be_bytes());
        }
    }
    if let Some((name, data)) = pe {
        // Lengths checked above: data ≤ 255, name ≤ 16.
        rec.extend_from_slice(&[OPT_PE_DATA, data.len() as u8]);
        rec.extend_from_slice(data);
        rec.extend_from_slice(&[OPT_PE_NAME, name.len() as u8]);
        rec.extend_from_slice(name);
    }
    if let Some(local) = &c.local {
        // 6 or 18: fits the byte.
        rec.extend_from_slice(&[OPT_RVS_LOCAL, local_len(local) as u8]);
        match local.ip() {
            IpAddr::V4(a) => rec.extend_from_slice(&a.octets()),
            IpAddr::V6(a) => rec.extend_from_slice(&a.octets()),
        }
        rec.extend_from_slice(&local.port().to_be_bytes());
    }
    if let Some(mark) = &c.bulk {
        rec.extend_from_slice(&[OPT_RVS_BULK, BULK_MARK_LEN as u8]);
        rec.extend_from_slice(&mark.answer.to_be_bytes());
        rec.extend_from_slice(&mark.index.to_be_bytes());
    }
    // At most 72 + 26 + 257 + 18 + 20 + 10 = 403 bytes: fits the 12 bits,
    // version 0.
    let len = u16::try_from(rec.len()).unwrap_or(u16::MAX) & V1_RECORD_MAXLEN as u16;
    rec[2..4].copy_from_slice(&len.to_be_bytes());
    Ok(())
}

/// Packs `conns` into v0 datagrams of at most `maxlen` bytes each (capped at
/// 65535), at most 255 records each: the 4-byte header, then 24-byte records,
/// each followed by the 24-byte sequence block iff its flags have
/// IN_SEQ/OUT_SEQ. v0 carries what the kernel's v0 sender writes and no
/// more: IPv4 only; the low 16 bits of the flags; no fwmark, timeout, PE or
/// local address (ignored here, as the kernel's v0 sender ignores them); the sequence
/// block is `seq` in little-endian order (see the module documentation), or
/// zeros when `seq` is `None`, and is not written when the flags lack the
/// sequence bits even if `seq` is `Some`.
///
/// Errors: an IPv6 (or mixed) connection, or `maxlen` too small for one
/// record.
pub fn build_v0(syncid: u8, conns: &[SyncConn], maxlen: usize) -> Result<Vec<Vec<u8>>, SyncError> {
    let header = HeaderLayout {
        template: vec![0, syncid, 0, 0],
        count_at: 0,
    };
    pack(conns, maxlen, &header, 1, encode_v0)
}

fn encode_v0(index: usize, c: &SyncConn, rec: &mut Vec<u8>) -> Result<(), SyncError> {
    let (IpAddr::V4(caddr), IpAddr::V4(vaddr), IpAddr::V4(daddr)) =
        (c.client.ip(), c.vip.ip(), c.dest.ip())
    else {
        return Err(SyncError::Ipv6InV0 { index });
    };
    let flags = (c.flags & 0xffff) as u16;
    rec.extend_from_slice(&[0, c.protocol]);
    rec.extend_from_slice(&c.client.port().to_be_bytes());
    rec.extend_from_slice(&c.vip.port().to_be_bytes());
    rec.extend_from_slice(&c.dest.port().to_be_bytes());
    rec.extend_from_slice(&caddr.octets());
    rec.extend_from_slice(&vaddr.octets());
    rec.extend_from_slice(&daddr.octets());
    rec.extend_from_slice(&flags.to_be_bytes());
    rec.extend_from_slice(&c.state.to_be_bytes());
    if u32::from(flags) & FLAG_SEQ_MASK != 0 {
        let seq = c.seq.unwrap_or_default();
        for v in seq.in_seq.iter().chain(&seq.out_seq) {
            rec.extend_from_slice(&v.to_le_bytes());
        }
    }
    Ok(())
}
