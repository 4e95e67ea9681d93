//! Protocol state machines and per-state timeouts (ip_vs_proto_tcp.c,
//! ip_vs_proto_udp.c, ip_vs_proto_sctp.c).
//!
//! IPVS does not track TCP or SCTP precisely: it keeps a coarse state per
//! connection, driven by the flags (TCP) or first chunk (SCTP) of each packet
//! it sees and by the packet's direction. The state decides two things the
//! operator can observe: the connection's idle timeout, and whether it counts
//! as *active* or *inactive* on its real server (the `ActiveConn`/`InActConn`
//! columns of `ipvsadm -Ln`, and the input of every least-connection
//! scheduler). rvs reproduces the kernel's transition tables exactly, so the
//! counters and timeouts an operator sees match what the kernel would show.
//!
//! The tables below are written in the kernel's layout: one row per
//! (direction, event), one column per current state, each cell the next state.
//! They were checked against the modern `tcp_states`/`tcp_states_dos` and
//! `sctp_states` tables of the kernel.
//!
//! Direction: [`Direction::Input`] is a client packet of a connection whose
//! replies pass through the director (NAT); [`Direction::Output`] is such a
//! reply; [`Direction::InputOnly`] is a client packet of a connection whose
//! replies the director never saw (DR/TUN, or NAT before the first reply —
//! the kernel's `NOOUTPUT` flag). Choosing the direction is the caller's job.

use core::time::Duration;

/// A TCP connection state, with the kernel's numeric values (they travel in
/// sync messages, so they matter).
#[repr(u8)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum TcpState {
    /// No segment seen yet; also the state of persistence templates.
    #[default]
    None = 0,
    /// Handshake done (or data seen).
    Established = 1,
    /// The real server sent a SYN (NAT, output direction).
    SynSent = 2,
    /// A client SYN was seen.
    SynRecv = 3,
    /// A FIN was seen on an established connection.
    FinWait = 4,
    /// Both sides closing.
    TimeWait = 5,
    /// Reset, or a segment with no interesting flag.
    Close = 6,
    /// The client closed first (NAT).
    CloseWait = 7,
    /// Waiting for the final ACK.
    LastAck = 8,
    /// A listening connection (used by the FTP helper).
    Listen = 9,
    /// SYN-ACK seen (mostly with `secure_tcp`).
    Synack = 10,
}

impl TcpState {
    /// Number of TCP states (`IP_VS_TCP_S_LAST`).
    pub const COUNT: usize = 11;

    /// Every state, in numeric order.
    pub const ALL: [TcpState; TcpState::COUNT] = [
        TcpState::None,
        TcpState::Established,
        TcpState::SynSent,
        TcpState::SynRecv,
        TcpState::FinWait,
        TcpState::TimeWait,
        TcpState::Close,
        TcpState::CloseWait,
        TcpState::LastAck,
        TcpState::Listen,
        TcpState::Synack,
    ];

    /// The name ipvsadm prints in `-Lc` output.
    pub const fn name(self) -> &'static str {
        match self {
            TcpState::None => "NONE",
            TcpState::Established => "ESTABLISHED",
            TcpState::SynSent => "SYN_SENT",
            TcpState::SynRecv => "SYN_RECV",
            TcpState::FinWait => "FIN_WAIT",
            TcpState::TimeWait => "TIME_WAIT",
            TcpState::Close => "CLOSE",
            TcpState::CloseWait => "CLOSE_WAIT",
            TcpState::LastAck => "LAST_ACK",
            TcpState::Listen => "LISTEN",
            TcpState::Synack => "SYNACK",
        }
    }

    /// The state with numeric value `v` (as stored in [`crate::conn::Conn::state`]
    /// or received in a sync message), `None` when out of range.
    pub const fn from_u8(v: u8) -> Option<TcpState> {
        if (v as usize) < TcpState::COUNT {
            Some(TcpState::ALL[v as usize])
        } else {
            None
        }
    }

    /// True when a connection in this state counts in the real server's
    /// `activeconns` (modern kernels' `tcp_state_active_table`):
    /// ESTABLISHED, SYN_SENT, SYN_RECV and SYNACK.
    pub const fn is_active(self) -> bool {
        matches!(
            self,
            TcpState::Established | TcpState::SynSent | TcpState::SynRecv | TcpState::Synack
        )
    }
}

/// Which way a packet travels relative to the connection (see the module doc).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Client → real server, on a connection whose replies the director sees.
    Input,
    /// Real server → client reply seen by the director (NAT/FULLNAT).
    Output,
    /// Client → real server, on a connection with no reply seen (DR/TUN, or
    /// NAT with `NOOUTPUT` still set).
    InputOnly,
}

impl Direction {
    const fn index(self) -> usize {
        match self {
            Direction::Input => 0,
            Direction::Output => 1,
            Direction::InputOnly => 2,
        }
    }
}

/// The TCP header flags the state machine looks at.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct TcpFlags {
    /// SYN.
    pub syn: bool,
    /// FIN.
    pub fin: bool,
    /// ACK.
    pub ack: bool,
    /// RST.
    pub rst: bool,
}

impl TcpFlags {
    /// FIN bit of the TCP flags byte (header offset 13).
    pub const FIN_BIT: u8 = 0x01;
    /// SYN bit.
    pub const SYN_BIT: u8 = 0x02;
    /// RST bit.
    pub const RST_BIT: u8 = 0x04;
    /// ACK bit.
    pub const ACK_BIT: u8 = 0x10;

    /// A bare SYN: a client opening a connection.
    pub const SYN: TcpFlags = TcpFlags::from_bits(Self::SYN_BIT);
    /// SYN+ACK: a server accepting one.
    pub const SYN_ACK: TcpFlags = TcpFlags::from_bits(Self::SYN_BIT | Self::ACK_BIT);
    /// A bare ACK.
    pub const ACK: TcpFlags = TcpFlags::from_bits(Self::ACK_BIT);
    /// FIN+ACK: one side closing.
    pub const FIN_ACK: TcpFlags = TcpFlags::from_bits(Self::FIN_BIT | Self::ACK_BIT);
    /// A bare RST.
    pub const RST: TcpFlags = TcpFlags::from_bits(Self::RST_BIT);

    /// Decode byte 13 of a TCP header.
    pub const fn from_bits(bits: u8) -> TcpFlags {
        TcpFlags {
            syn: bits & Self::SYN_BIT != 0,
            fin: bits & Self::FIN_BIT != 0,
            ack: bits & Self::ACK_BIT != 0,
            rst: bits & Self::RST_BIT != 0,
        }
    }

    /// The table row (`tcp_state_idx`): RST has priority, then SYN, FIN, ACK;
    /// `None` when no flag is set.
    const fn row(self) -> Option<usize> {
        if self.rst {
            Some(3)
        } else if self.syn {
            Some(0)
        } else if self.fin {
            Some(1)
        } else if self.ack {
            Some(2)
        } else {
            None
        }
    }
}

use TcpState as T;
const ES: T = T::Established;
const SS: T = T::SynSent;
const SR: T = T::SynRecv;
const FW: T = T::FinWait;
const TW: T = T::TimeWait;
const CL: T = T::Close;
const CW: T = T::CloseWait;
const LA: T = T::LastAck;
const LI: T = T::Listen;
const SA: T = T::Synack;

type TcpTable = [[[TcpState; TcpState::COUNT]; 4]; 3];

/// The normal TCP table: `[direction][syn, fin, ack, rst][current state]`.
#[rustfmt::skip]
const TCP_STATES: TcpTable = [
    // INPUT      NO  ES  SS  SR  FW  TW  CL  CW  LA  LI  SA
    [/* syn */ [SR, ES, ES, SR, SR, SR, SR, SR, SR, SR, SR],
     /* fin */ [CL, CW, SS, TW, TW, TW, CL, CW, LA, LI, TW],
     /* ack */ [ES, ES, SS, ES, FW, TW, CL, CW, CL, LI, ES],
     /* rst */ [CL, CL, CL, SR, CL, CL, CL, CL, LA, LI, SR]],
    // OUTPUT     NO  ES  SS  SR  FW  TW  CL  CW  LA  LI  SA
    [/* syn */ [SS, ES, SS, SR, SS, SS, SS, SS, SS, LI, SR],
     /* fin */ [TW, FW, SS, TW, FW, TW, CL, TW, LA, LI, TW],
     /* ack */ [ES, ES, SS, ES, FW, TW, CL, CW, LA, ES, ES],
     /* rst */ [CL, CL, SS, CL, CL, TW, CL, CL, CL, CL, CL]],
    // INPUT-ONLY NO  ES  SS  SR  FW  TW  CL  CW  LA  LI  SA
    [/* syn */ [SR, ES, ES, SR, SR, SR, SR, SR, SR, SR, SR],
     /* fin */ [CL, FW, SS, TW, FW, TW, CL, CW, LA, LI, TW],
     /* ack */ [ES, ES, SS, ES, FW, TW, CL, CW, CL, LI, ES],
     /* rst */ [CL, CL, CL, SR, CL, CL, CL, CL, LA, LI, CL]],
];

/// The `secure_tcp` table (`tcp_states_dos`): half-open connections are kept
/// in SYN_RECV/SYNACK (short timeouts) until the handshake really completes.
#[rustfmt::skip]
const TCP_STATES_DOS: TcpTable = [
    // INPUT      NO  ES  SS  SR  FW  TW  CL  CW  LA  LI  SA
    [/* syn */ [SR, ES, ES, SR, SR, SR, SR, SR, SR, SR, SA],
     /* fin */ [CL, CW, SS, TW, TW, TW, CL, CW, LA, LI, SA],
     /* ack */ [ES, ES, SS, SR, FW, TW, CL, CW, CL, LI, SA],
     /* rst */ [CL, CL, CL, SR, CL, CL, CL, CL, LA, LI, CL]],
    // OUTPUT     NO  ES  SS  SR  FW  TW  CL  CW  LA  LI  SA
    [/* syn */ [SS, ES, SS, SA, SS, SS, SS, SS, SS, LI, SA],
     /* fin */ [TW, FW, SS, TW, FW, TW, CL, TW, LA, LI, TW],
     /* ack */ [ES, ES, SS, ES, FW, TW, CL, CW, LA, ES, ES],
     /* rst */ [CL, CL, SS, CL, CL, TW, CL, CL, CL, CL, CL]],
    // INPUT-ONLY NO  ES  SS  SR  FW  TW  CL  CW  LA  LI  SA
    [/* syn */ [SA, ES, ES, SR, SA, SA, SA, SA, SA, SA, SA],
     /* fin */ [CL, FW, SS, TW, FW, TW, CL, CW, LA, LI, TW],
     /* ack */ [ES, ES, SS, ES, FW, TW, CL, CW, CL, LI, ES],
     /* rst */ [CL, CL, CL, SR, CL, CL, CL, CL, LA, LI, CL]],
];

/// The next TCP state after a segment with `flags` travelling in `dir`.
///
/// `secure_tcp` selects the kernel's `tcp_states_dos` table (sysctl
/// `secure_tcp`). A segment with none of RST/SYN/FIN/ACK moves the
/// connection to CLOSE, as the kernel does (its `new_state` starts as CLOSE
/// and no table lookup happens).
pub fn tcp_next(state: TcpState, dir: Direction, flags: TcpFlags, secure_tcp: bool) -> TcpState {
    let Some(row) = flags.row() else {
        return TcpState::Close;
    };
    let table = if secure_tcp {
        &TCP_STATES_DOS
    } else {
        &TCP_STATES
    };
    table[dir.index()][row][state as usize]
}

/// The single UDP state (`IP_VS_UDP_S_NORMAL`). UDP connections are never
/// active; ipvsadm prints the state as `UDP`.
#[repr(u8)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum UdpState {
    /// The only state.
    #[default]
    Normal = 0,
}

impl UdpState {
    /// The name ipvsadm prints.
    pub const fn name(self) -> &'static str {
        "UDP"
    }

    /// Always false: UDP connections count as inactive.
    pub const fn is_active(self) -> bool {
        false
    }
}

/// An SCTP association state, with the kernel's numeric values.
#[repr(u8)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum SctpState {
    /// Nothing seen yet; also the state of templates.
    #[default]
    None = 0,
    /// First client INIT sent, waiting for the server's INIT ACK.
    Init1 = 1,
    /// A further client INIT sent.
    Init = 2,
    /// Server INIT ACK sent, waiting for the client's COOKIE ECHO.
    CookieSent = 3,
    /// Client COOKIE ECHO sent, waiting for the server's COOKIE ACK.
    CookieReplied = 4,
    /// Server-initiated setup: server INIT sent.
    CookieWait = 5,
    /// Server-initiated setup: client INIT ACK sent.
    Cookie = 6,
    /// Server-initiated setup: server COOKIE ECHO sent.
    CookieEchoed = 7,
    /// Association up.
    Established = 8,
    /// SHUTDOWN sent by the server.
    ShutdownSent = 9,
    /// SHUTDOWN sent by the client.
    ShutdownReceived = 10,
    /// SHUTDOWN ACK sent.
    ShutdownAckSent = 11,
    /// INIT answered with ABORT.
    Rejected = 12,
    /// Association closed.
    Closed = 13,
}

impl SctpState {
    /// Number of SCTP states (`IP_VS_SCTP_S_LAST`).
    pub const COUNT: usize = 14;

    /// Every state, in numeric order.
    pub const ALL: [SctpState; SctpState::COUNT] = [
        SctpState::None,
        SctpState::Init1,
        SctpState::Init,
        SctpState::CookieSent,
        SctpState::CookieReplied,
        SctpState::CookieWait,
        SctpState::Cookie,
        SctpState::CookieEchoed,
        SctpState::Established,
        SctpState::ShutdownSent,
        SctpState::ShutdownReceived,
        SctpState::ShutdownAckSent,
        SctpState::Rejected,
        SctpState::Closed,
    ];

    /// The name ipvsadm prints (`sctp_state_name_table`).
    pub const fn name(self) -> &'static str {
        match self {
            SctpState::None => "NONE",
            SctpState::Init1 => "INIT1",
            SctpState::Init => "INIT",
            SctpState::CookieSent => "C-SENT",
            SctpState::CookieReplied => "C-REPLIED",
            SctpState::CookieWait => "C-WAIT",
            SctpState::Cookie => "COOKIE",
            SctpState::CookieEchoed => "C-ECHOED",
            SctpState::Established => "ESTABLISHED",
            SctpState::ShutdownSent => "S-SENT",
            SctpState::ShutdownReceived => "S-RECEIVED",
            SctpState::ShutdownAckSent => "S-ACK-SENT",
            SctpState::Rejected => "REJECTED",
            SctpState::Closed => "CLOSED",
        }
    }

    /// The state with numeric value `v`, `None` when out of range.
    pub const fn from_u8(v: u8) -> Option<SctpState> {
        if (v as usize) < SctpState::COUNT {
            Some(SctpState::ALL[v as usize])
        } else {
            None
        }
    }

    /// True only for ESTABLISHED (`set_sctp_state`).
    pub const fn is_active(self) -> bool {
        matches!(self, SctpState::Established)
    }
}

/// What an SCTP packet means to the state machine, derived from its first
/// chunk (`ipvs_sctp_event_t`).
#[repr(u8)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum SctpEvent {
    /// DATA, SACK, HEARTBEAT(-ACK), ECNE, CWR and any unknown chunk type.
    Data = 0,
    /// INIT.
    Init = 1,
    /// INIT ACK.
    InitAck = 2,
    /// COOKIE ECHO.
    CookieEcho = 3,
    /// COOKIE ACK.
    CookieAck = 4,
    /// SHUTDOWN.
    Shutdown = 5,
    /// SHUTDOWN ACK.
    ShutdownAck = 6,
    /// SHUTDOWN COMPLETE.
    ShutdownComplete = 7,
    /// ERROR.
    Error = 8,
    /// ABORT.
    Abort = 9,
}

impl SctpEvent {
    /// Number of events (`IP_VS_SCTP_EVENT_LAST`).
    pub const COUNT: usize = 10;
}

/// SCTP chunk type numbers (RFC 9260 §3.2) the event mapping uses.
pub mod sctp_chunk {
    /// DATA.
    pub const DATA: u8 = 0;
    /// INIT.
    pub const INIT: u8 = 1;
    /// INIT ACK.
    pub const INIT_ACK: u8 = 2;
    /// SACK.
    pub const SACK: u8 = 3;
    /// HEARTBEAT.
    pub const HEARTBEAT: u8 = 4;
    /// HEARTBEAT ACK.
    pub const HEARTBEAT_ACK: u8 = 5;
    /// ABORT.
    pub const ABORT: u8 = 6;
    /// SHUTDOWN.
    pub const SHUTDOWN: u8 = 7;
    /// SHUTDOWN ACK.
    pub const SHUTDOWN_ACK: u8 = 8;
    /// ERROR.
    pub const ERROR: u8 = 9;
    /// COOKIE ECHO.
    pub const COOKIE_ECHO: u8 = 10;
    /// COOKIE ACK.
    pub const COOKIE_ACK: u8 = 11;
    /// ECNE.
    pub const ECN_ECNE: u8 = 12;
    /// CWR.
    pub const ECN_CWR: u8 = 13;
    /// SHUTDOWN COMPLETE.
    pub const SHUTDOWN_COMPLETE: u8 = 14;
}

/// The event of an SCTP packet, as the kernel maps it.
///
/// `chunk_type` is the type of the packet's first chunk. `next_chunk_type`
/// is the type of the chunk that follows it, if the packet has one (only
/// looked at when the first chunk is COOKIE ECHO or COOKIE ACK: an ABORT
/// bundled after those makes the packet an ABORT event, as RFC 9260 §3.3.7
/// allows control chunks before an ABORT). Chunk types the kernel's table
/// does not list (15 and above, e.g. AUTH, FORWARD TSN) count as DATA.
pub const fn sctp_event_from_chunk(chunk_type: u8, next_chunk_type: Option<u8>) -> SctpEvent {
    use sctp_chunk as c;
    let ty = match (chunk_type, next_chunk_type) {
        (c::COOKIE_ECHO | c::COOKIE_ACK, Some(c::ABORT)) => c::ABORT,
        (t, _) => t,
    };
    match ty {
        c::INIT => SctpEvent::Init,
        c::INIT_ACK => SctpEvent::InitAck,
        c::ABORT => SctpEvent::Abort,
        c::SHUTDOWN => SctpEvent::Shutdown,
        c::SHUTDOWN_ACK => SctpEvent::ShutdownAck,
        c::ERROR => SctpEvent::Error,
        c::COOKIE_ECHO => SctpEvent::CookieEcho,
        c::COOKIE_ACK => SctpEvent::CookieAck,
        c::SHUTDOWN_COMPLETE => SctpEvent::ShutdownComplete,
        // DATA, SACK, HEARTBEAT(-ACK), ECNE, CWR and everything unknown.
        _ => SctpEvent::Data,
    }
}

use SctpState as S;
const S_I1: S = S::Init1;
const S_IN: S = S::Init;
const S_CS: S = S::CookieSent;
const S_CR: S = S::CookieReplied;
const S_CW: S = S::CookieWait;
const S_CO: S = S::Cookie;
const S_CE: S = S::CookieEchoed;
const S_ES: S = S::Established;
const S_SS: S = S::ShutdownSent;
const S_SR: S = S::ShutdownReceived;
const S_SA: S = S::ShutdownAckSent;
const S_RJ: S = S::Rejected;
const S_CL: S = S::Closed;

/// `[direction][event][current state]`, the kernel's `sctp_states`.
#[rustfmt::skip]
const SCTP_STATES: [[[SctpState; SctpState::COUNT]; SctpEvent::COUNT]; 3] = [
    // INPUT         NO    I1    IN    CS    CR    CW    CO    CE    ES    SS    SR    SA    RJ    CL
    [/* data */   [S_ES, S_I1, S_IN, S_CS, S_CR, S_CW, S_CO, S_CE, S_ES, S_SS, S_SR, S_SA, S_RJ, S_CL],
     /* init */   [S_I1, S_IN, S_IN, S_CS, S_CR, S_CW, S_CO, S_CE, S_ES, S_SS, S_SR, S_SA, S_IN, S_IN],
     /* init_a */ [S_CW, S_CW, S_CW, S_CS, S_CR, S_CO, S_CO, S_CE, S_ES, S_SS, S_SR, S_SA, S_RJ, S_CL],
     /* c_echo */ [S_CR, S_IN, S_IN, S_CR, S_CR, S_CW, S_CO, S_CE, S_ES, S_SS, S_SR, S_SA, S_RJ, S_CL],
     /* c_ack */  [S_ES, S_I1, S_IN, S_CS, S_CR, S_CW, S_CO, S_ES, S_ES, S_SS, S_SR, S_SA, S_RJ, S_CL],
     /* shut */   [S_SR, S_I1, S_IN, S_CS, S_CR, S_CW, S_CO, S_CE, S_SR, S_SS, S_SR, S_SA, S_RJ, S_CL],
     /* shut_a */ [S_CL, S_IN, S_IN, S_CS, S_CR, S_CW, S_CO, S_CE, S_ES, S_CL, S_SR, S_CL, S_RJ, S_CL],
     /* shut_c */ [S_CL, S_CL, S_CL, S_CS, S_CR, S_CW, S_CO, S_CE, S_ES, S_SS, S_SR, S_CL, S_RJ, S_CL],
     /* error */  [S_CL, S_I1, S_IN, S_CS, S_CR, S_CW, S_CO, S_CL, S_ES, S_SS, S_SR, S_SA, S_RJ, S_CL],
     /* abort */  [S_CL, S_CL, S_CL, S_CL, S_CL, S_RJ, S_CL, S_CL, S_CL, S_CL, S_CL, S_CL, S_CL, S_CL]],
    // OUTPUT        NO    I1    IN    CS    CR    CW    CO    CE    ES    SS    SR    SA    RJ    CL
    [/* data */   [S_ES, S_I1, S_IN, S_CS, S_CR, S_CW, S_CO, S_CE, S_ES, S_SS, S_SR, S_SA, S_RJ, S_CL],
     /* init */   [S_CW, S_CW, S_CW, S_CW, S_CW, S_CW, S_CW, S_CW, S_ES, S_CW, S_CW, S_CW, S_CW, S_CW],
     /* init_a */ [S_CS, S_CS, S_CS, S_CS, S_CR, S_CW, S_CO, S_CE, S_ES, S_SS, S_SR, S_SA, S_RJ, S_CL],
     /* c_echo */ [S_CE, S_CE, S_CE, S_CE, S_CE, S_CE, S_CE, S_CE, S_ES, S_SS, S_SR, S_SA, S_RJ, S_CL],
     /* c_ack */  [S_ES, S_ES, S_ES, S_ES, S_ES, S_ES, S_ES, S_ES, S_ES, S_SS, S_SR, S_SA, S_RJ, S_CL],
     /* shut */   [S_SS, S_SS, S_SS, S_SS, S_SS, S_SS, S_SS, S_SS, S_SS, S_SS, S_SR, S_SA, S_RJ, S_CL],
     /* shut_a */ [S_SA, S_SA, S_SA, S_SA, S_SA, S_CW, S_CO, S_CE, S_ES, S_SA, S_SA, S_SA, S_RJ, S_CL],
     /* shut_c */ [S_CL, S_I1, S_IN, S_CS, S_CR, S_CW, S_CO, S_CE, S_ES, S_SS, S_SR, S_SA, S_RJ, S_CL],
     /* error */  [S_CL, S_CL, S_CL, S_CL, S_CL, S_CW, S_CO, S_CE, S_ES, S_SS, S_SR, S_SA, S_RJ, S_CL],
     /* abort */  [S_CL, S_RJ, S_CL, S_CL, S_CL, S_CL, S_CL, S_CL, S_CL, S_CL, S_CL, S_CL, S_CL, S_CL]],
    // INPUT-ONLY    NO    I1    IN    CS    CR    CW    CO    CE    ES    SS    SR    SA    RJ    CL
    [/* data */   [S_ES, S_I1, S_IN, S_CS, S_CR, S_ES, S_CO, S_CE, S_ES, S_SS, S_SR, S_SA, S_RJ, S_CL],
     /* init */   [S_I1, S_IN, S_IN, S_IN, S_IN, S_IN, S_CO, S_CE, S_ES, S_SS, S_SR, S_SA, S_IN, S_IN],
     /* init_a */ [S_CE, S_CE, S_CE, S_CE, S_CE, S_CE, S_CO, S_CE, S_ES, S_SS, S_SR, S_SA, S_RJ, S_CL],
     /* c_echo */ [S_ES, S_ES, S_ES, S_ES, S_ES, S_ES, S_CO, S_CE, S_ES, S_SS, S_SR, S_SA, S_RJ, S_CL],
     /* c_ack */  [S_ES, S_I1, S_IN, S_ES, S_ES, S_CW, S_ES, S_ES, S_ES, S_SS, S_SR, S_SA, S_RJ, S_CL],
     /* shut */   [S_SR, S_I1, S_IN, S_CS, S_CR, S_CW, S_CO, S_CE, S_SR, S_SS, S_SR, S_SA, S_RJ, S_CL],
     /* shut_a */ [S_CL, S_IN, S_IN, S_CS, S_CR, S_CW, S_CO, S_CE, S_CL, S_CL, S_SR, S_CL, S_RJ, S_CL],
     /* shut_c */ [S_CL, S_CL, S_CL, S_CL, S_CL, S_CW, S_CO, S_CE, S_ES, S_SS, S_CL, S_CL, S_RJ, S_CL],
     /* error */  [S_CL, S_I1, S_IN, S_CS, S_CR, S_CW, S_CO, S_CE, S_ES, S_SS, S_SR, S_SA, S_RJ, S_CL],
     /* abort */  [S_CL, S_CL, S_CL, S_CL, S_CL, S_RJ, S_CL, S_CL, S_CL, S_CL, S_CL, S_CL, S_CL, S_CL]],
];

/// The next SCTP state after a packet whose event is `event`, travelling in `dir`.
pub fn sctp_next(state: SctpState, dir: Direction, event: SctpEvent) -> SctpState {
    SCTP_STATES[dir.index()][event as usize][state as usize]
}

/// `IP_VS_SCTP_MAX_RTO`: 61 s, the timeout of most SCTP states.
const SCTP_MAX_RTO_MS: u32 = 61_000;

/// Per-state idle timeouts, in milliseconds, for every protocol.
///
/// After each packet a connection's timeout becomes the timeout of its new
/// state. `ipvsadm --set` can change only three of them (see
/// [`Timeouts::set_ipvsadm`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timeouts {
    tcp_ms: [u32; TcpState::COUNT],
    udp_ms: u32,
    udp_last_ms: u32,
    sctp_ms: [u32; SctpState::COUNT],
}

impl Default for Timeouts {
    /// The kernel defaults (`tcp_timeouts`, `udp_timeouts`, `sctp_timeouts`).
    fn default() -> Self {
        Timeouts {
            tcp_ms: [
                2_000,   // NONE
                900_000, // ESTABLISHED
                120_000, // SYN_SENT
                60_000,  // SYN_RECV
                120_000, // FIN_WAIT
                120_000, // TIME_WAIT
                10_000,  // CLOSE
                60_000,  // CLOSE_WAIT
                30_000,  // LAST_ACK
                120_000, // LISTEN
                120_000, // SYNACK
            ],
            udp_ms: 300_000,
            udp_last_ms: 2_000,
            sctp_ms: [
                2_000,           // NONE
                4_000,           // INIT1
                SCTP_MAX_RTO_MS, // INIT
                SCTP_MAX_RTO_MS, // COOKIE_SENT
                SCTP_MAX_RTO_MS, // COOKIE_REPLIED
                SCTP_MAX_RTO_MS, // COOKIE_WAIT
                SCTP_MAX_RTO_MS, // COOKIE
                SCTP_MAX_RTO_MS, // COOKIE_ECHOED
                900_000,         // ESTABLISHED
                SCTP_MAX_RTO_MS, // SHUTDOWN_SENT
                SCTP_MAX_RTO_MS, // SHUTDOWN_RECEIVED
                SCTP_MAX_RTO_MS, // SHUTDOWN_ACK_SENT
                4_000,           // REJECTED
                SCTP_MAX_RTO_MS, // CLOSED
            ],
        }
    }
}

impl Timeouts {
    /// Timeout of a TCP state.
    pub fn tcp(&self, state: TcpState) -> Duration {
        Duration::from_millis(u64::from(self.tcp_ms[state as usize]))
    }

    /// Timeout of the UDP NORMAL state.
    pub fn udp(&self) -> Duration {
        Duration::from_millis(u64::from(self.udp_ms))
    }

    /// The UDP "LAST" timeout (2 s; the kernel's table sentinel, kept for
    /// completeness).
    pub fn udp_last(&self) -> Duration {
        Duration::from_millis(u64::from(self.udp_last_ms))
    }

    /// Timeout of an SCTP state.
    pub fn sctp(&self, state: SctpState) -> Duration {
        Duration::from_millis(u64::from(self.sctp_ms[state as usize]))
    }

    /// Set one TCP state's timeout (the kernel's per-state sysctl-free
    /// setter; rvs uses it for configuration beyond ipvsadm's three values).
    /// Sub-millisecond parts are dropped; values beyond `u32::MAX` ms saturate.
    pub fn set_tcp(&mut self, state: TcpState, timeout: Duration) {
        self.tcp_ms[state as usize] = duration_ms(timeout);
    }

    /// Set one SCTP state's timeout (same rules as [`Timeouts::set_tcp`]).
    pub fn set_sctp(&mut self, state: SctpState, timeout: Duration) {
        self.sctp_ms[state as usize] = duration_ms(timeout);
    }

    /// `ipvsadm --set tcp tcpfin udp` (seconds): changes ESTABLISHED,
    /// FIN_WAIT and UDP NORMAL; a 0 leaves that value unchanged, as the
    /// kernel's `ip_vs_set_timeout` does.
    pub fn set_ipvsadm(&mut self, tcp: u32, tcpfin: u32, udp: u32) {
        let ms = |s: u32| u32::try_from(u64::from(s) * 1000).unwrap_or(u32::MAX);
        if tcp != 0 {
            self.tcp_ms[TcpState::Established as usize] = ms(tcp);
        }
        if tcpfin != 0 {
            self.tcp_ms[TcpState::FinWait as usize] = ms(tcpfin);
        }
        if udp != 0 {
            self.udp_ms = ms(udp);
        }
    }

    /// The three values `ipvsadm --timeout` prints: (tcp, tcpfin, udp) in
    /// whole seconds.
    pub fn ipvsadm(&self) -> (u32, u32, u32) {
        (
            self.tcp_ms[TcpState::Established as usize] / 1000,
            self.tcp_ms[TcpState::FinWait as usize] / 1000,
            self.udp_ms / 1000,
        )
    }
}

fn duration_ms(d: Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The spec table (IPVS.md §2.1, modern kernels, `*` = ES), transcribed
    /// as text independently of the const arrays above.
    const SPEC_TCP: &str = "
        IN syn     | SR | ES | ES | SR | SR | SR | SR | SR | SR | SR | SR
        IN fin     | CL | CW | SS | TW | TW | TW | CL | CW | LA | LI | TW
        IN ack     | ES | ES | SS | ES | FW | TW | CL | CW | CL | LI | ES
        IN rst     | CL | CL | CL | SR | CL | CL | CL | CL | LA | LI | SR
        OUT syn    | SS | ES | SS | SR | SS | SS | SS | SS | SS | LI | SR
        OUT fin    | TW | FW | SS | TW | FW | TW | CL | TW | LA | LI | TW
        OUT ack    | ES | ES | SS | ES | FW | TW | CL | CW | LA | ES | ES
        OUT rst    | CL | CL | SS | CL | CL | TW | CL | CL | CL | CL | CL
        INONLY syn | SR | ES | ES | SR | SR | SR | SR | SR | SR | SR | SR
        INONLY fin | CL | FW | SS | TW | FW | TW | CL | CW | LA | LI | TW
        INONLY ack | ES | ES | SS | ES | FW | TW | CL | CW | CL | LI | ES
        INONLY rst | CL | CL | CL | SR | CL | CL | CL | CL | LA | LI | CL
    ";

    /// Differences of `tcp_states_dos` from the normal table, as
    /// "dir flag from->to". The spec lists all but `IN rst SA->CL`, which
    /// the kernel's table has too.
    const SPEC_DOS_DIFFS: &str = "
        IN syn SA->SA
        IN fin SA->SA
        IN ack SR->SR
        IN ack SA->SA
        IN rst SA->CL
        OUT syn SR->SA
        OUT syn SA->SA
        INONLY syn NO->SA
        INONLY syn FW->SA
        INONLY syn TW->SA
        INONLY syn CL->SA
        INONLY syn CW->SA
        INONLY syn LA->SA
        INONLY syn LI->SA
        INONLY syn SA->SA
    ";

    const ABBR: [&str; 11] = [
        "NO", "ES", "SS", "SR", "FW", "TW", "CL", "CW", "LA", "LI", "SA",
    ];

    fn abbr(s: &str) -> TcpState {
        let i = ABBR.iter().position(|a| *a == s).unwrap();
        TcpState::from_u8(i as u8).unwrap()
    }

    fn dir_of(s: &str) -> Direction {
        match s {
            "IN" => Direction::Input,
            "OUT" => Direction::Output,
            "INONLY" => Direction::InputOnly,
            _ => panic!("bad dir {s}"),
        }
    }

    fn flag_of(s: &str) -> TcpFlags {
        let mut f = TcpFlags::default();
        match s {
            "syn" => f.syn = true,
            "fin" => f.fin = true,
            "ack" => f.ack = true,
            "rst" => f.rst = true,
            _ => panic!("bad flag {s}"),
        }
        f
    }

    /// key: (dir index, flag name) -> row of 11 next states.
    fn parse_spec(secure: bool) -> Vec<(Direction, &'static str, [TcpState; 11])> {
        let mut rows = Vec::new();
        for line in SPEC_TCP.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let mut cells = line.split('|').map(str::trim);
            let head: Vec<&str> = cells.next().unwrap().split_whitespace().collect();
            let next: Vec<TcpState> = cells.map(abbr).collect();
            assert_eq!(next.len(), 11, "{line}");
            let mut row: [TcpState; 11] = next.try_into().unwrap();
            if secure {
                for d in SPEC_DOS_DIFFS
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                {
                    let w: Vec<&str> = d.split_whitespace().collect();
                    if w[0] == head[0] && w[1] == head[1] {
                        let (from, to) = w[2].split_once("->").unwrap();
                        row[abbr(from) as usize] = abbr(to);
                    }
                }
            }
            rows.push((dir_of(head[0]), head[1], row));
        }
        rows
    }

    fn spec_next(state: TcpState, dir: Direction, flags: TcpFlags, secure: bool) -> TcpState {
        let name = if flags.rst {
            "rst"
        } else if flags.syn {
            "syn"
        } else if flags.fin {
            "fin"
        } else if flags.ack {
            "ack"
        } else {
            return TcpState::Close;
        };
        parse_spec(secure)
            .into_iter()
            .find(|(d, f, _)| *d == dir && *f == name)
            .map(|(_, _, row)| row[state as usize])
            .unwrap()
    }

    #[test]
    fn tcp_table_matches_spec_text_exhaustively() {
        for secure in [false, true] {
            let rows = parse_spec(secure);
            assert_eq!(rows.len(), 12);
            for (dir, flag, row) in rows {
                for s in TcpState::ALL {
                    assert_eq!(
                        tcp_next(s, dir, flag_of(flag), secure),
                        row[s as usize],
                        "secure={secure} {dir:?} {flag} from {}",
                        s.name()
                    );
                }
            }
        }
    }

    #[test]
    fn tcp_pinned_sequences() {
        let f = TcpFlags::from_bits;
        let syn = f(0x02);
        let synack = f(0x12);
        let ack = f(0x10);
        let finack = f(0x11);
        // NAT three-way handshake and client close.
        let mut s = TcpState::None;
        s = tcp_next(s, Direction::InputOnly, syn, false);
        assert_eq!(s, TcpState::SynRecv);
        s = tcp_next(s, Direction::Output, synack, false);
        assert_eq!(s, TcpState::SynRecv); // SYN has priority over ACK
        s = tcp_next(s, Direction::Input, ack, false);
        assert_eq!(s, TcpState::Established);
        s = tcp_next(s, Direction::Input, finack, false);
        assert_eq!(s, TcpState::CloseWait);
        s = tcp_next(s, Direction::Output, finack, false);
        assert_eq!(s, TcpState::TimeWait);
        // DR: client FIN in ESTABLISHED -> FIN_WAIT.
        assert_eq!(
            tcp_next(TcpState::Established, Direction::InputOnly, finack, false),
            TcpState::FinWait
        );
        // RST beats SYN; no flags -> CLOSE.
        assert_eq!(
            tcp_next(TcpState::Established, Direction::Input, f(0x06), false),
            TcpState::Close
        );
        assert_eq!(
            tcp_next(TcpState::Established, Direction::Input, f(0x00), false),
            TcpState::Close
        );
        assert_eq!(
            tcp_next(TcpState::Established, Direction::Input, f(0x08), true),
            TcpState::Close
        ); // PSH alone
        // secure_tcp: ACK in SYN_RECV stays SYN_RECV (input), SYN from NONE (DR) -> SYNACK.
        assert_eq!(
            tcp_next(TcpState::SynRecv, Direction::Input, ack, true),
            TcpState::SynRecv
        );
        assert_eq!(
            tcp_next(TcpState::None, Direction::InputOnly, syn, true),
            TcpState::Synack
        );
    }

    #[test]
    fn tcp_names_values_and_activity() {
        let names: Vec<&str> = TcpState::ALL.iter().map(|s| s.name()).collect();
        assert_eq!(
            names.join(" "),
            "NONE ESTABLISHED SYN_SENT SYN_RECV FIN_WAIT TIME_WAIT CLOSE CLOSE_WAIT LAST_ACK LISTEN SYNACK"
        );
        for (i, s) in TcpState::ALL.iter().enumerate() {
            assert_eq!(*s as usize, i);
            assert_eq!(TcpState::from_u8(i as u8), Some(*s));
        }
        assert_eq!(TcpState::from_u8(11), None);
        let active: Vec<&str> = TcpState::ALL
            .iter()
            .filter(|s| s.is_active())
            .map(|s| s.name())
            .collect();
        assert_eq!(active, ["ESTABLISHED", "SYN_SENT", "SYN_RECV", "SYNACK"]);
        assert_eq!(
            TcpFlags::from_bits(0x17),
            TcpFlags {
                syn: true,
                fin: true,
                ack: true,
                rst: true
            }
        );
        let fin_ack = TcpFlags {
            fin: true,
            ack: true,
            ..TcpFlags::default()
        };
        assert_eq!(TcpFlags::FIN_ACK, fin_ack);
        let syn_ack = TcpFlags {
            ack: true,
            ..TcpFlags::SYN
        };
        assert_eq!(TcpFlags::SYN_ACK, syn_ack);
        assert_eq!(
            [TcpFlags::SYN, TcpFlags::ACK, TcpFlags::RST].map(|f| f.row()),
            [Some(0), Some(2), Some(3)]
        );
    }

    #[test]
    fn sctp_names_events_and_handshake() {
        let names: Vec<&str> = SctpState::ALL.iter().map(|s| s.name()).collect();
        assert_eq!(
            names.join(" "),
            "NONE INIT1 INIT C-SENT C-REPLIED C-WAIT COOKIE C-ECHOED ESTABLISHED S-SENT S-RECEIVED S-ACK-SENT REJECTED CLOSED"
        );
        for (i, s) in SctpState::ALL.iter().enumerate() {
            assert_eq!(*s as usize, i);
            assert_eq!(SctpState::from_u8(i as u8), Some(*s));
        }
        assert_eq!(SctpState::from_u8(14), None);
        assert!(SctpState::Established.is_active());
        assert_eq!(SctpState::ALL.iter().filter(|s| s.is_active()).count(), 1);

        use sctp_chunk as c;
        let ev = |t| sctp_event_from_chunk(t, None);
        assert_eq!(ev(c::DATA), SctpEvent::Data);
        assert_eq!(ev(c::SACK), SctpEvent::Data);
        assert_eq!(ev(c::HEARTBEAT), SctpEvent::Data);
        assert_eq!(ev(c::HEARTBEAT_ACK), SctpEvent::Data);
        assert_eq!(ev(c::ECN_ECNE), SctpEvent::Data);
        assert_eq!(ev(c::ECN_CWR), SctpEvent::Data);
        assert_eq!(ev(15), SctpEvent::Data);
        assert_eq!(ev(0xc0), SctpEvent::Data);
        assert_eq!(ev(c::INIT), SctpEvent::Init);
        assert_eq!(ev(c::INIT_ACK), SctpEvent::InitAck);
        assert_eq!(ev(c::ABORT), SctpEvent::Abort);
        assert_eq!(ev(c::SHUTDOWN), SctpEvent::Shutdown);
        assert_eq!(ev(c::SHUTDOWN_ACK), SctpEvent::ShutdownAck);
        assert_eq!(ev(c::ERROR), SctpEvent::Error);
        assert_eq!(ev(c::COOKIE_ECHO), SctpEvent::CookieEcho);
        assert_eq!(ev(c::COOKIE_ACK), SctpEvent::CookieAck);
        assert_eq!(ev(c::SHUTDOWN_COMPLETE), SctpEvent::ShutdownComplete);
        assert_eq!(
            sctp_event_from_chunk(c::COOKIE_ECHO, Some(c::ABORT)),
            SctpEvent::Abort
        );
        assert_eq!(
            sctp_event_from_chunk(c::COOKIE_ACK, Some(c::ABORT)),
            SctpEvent::Abort
        );
        assert_eq!(
            sctp_event_from_chunk(c::DATA, Some(c::ABORT)),
            SctpEvent::Data
        );

        // NAT association setup and client shutdown.
        let steps = [
            (Direction::InputOnly, SctpEvent::Init, SctpState::Init1),
            (Direction::Output, SctpEvent::InitAck, SctpState::CookieSent),
            (
                Direction::Input,
                SctpEvent::CookieEcho,
                SctpState::CookieReplied,
            ),
            (
                Direction::Output,
                SctpEvent::CookieAck,
                SctpState::Established,
            ),
            (Direction::Input, SctpEvent::Data, SctpState::Established),
            (
                Direction::Input,
                SctpEvent::Shutdown,
                SctpState::ShutdownReceived,
            ),
            (
                Direction::Output,
                SctpEvent::ShutdownAck,
                SctpState::ShutdownAckSent,
            ),
            (
                Direction::Input,
                SctpEvent::ShutdownComplete,
                SctpState::Closed,
            ),
        ];
        let mut s = SctpState::None;
        for (d, e, want) in steps {
            s = sctp_next(s, d, e);
            assert_eq!(s, want, "{d:?} {e:?}");
        }
        // DR: INIT then COOKIE ECHO from the client establishes.
        let s = sctp_next(SctpState::None, Direction::InputOnly, SctpEvent::Init);
        let s = sctp_next(s, Direction::InputOnly, SctpEvent::CookieEcho);
        assert_eq!(s, SctpState::Established);
        // INIT answered with ABORT -> REJECTED (output, from INIT1).
        assert_eq!(
            sctp_next(SctpState::Init1, Direction::Output, SctpEvent::Abort),
            SctpState::Rejected
        );
        // A new INIT on a closed association restarts it.
        assert_eq!(
            sctp_next(SctpState::Closed, Direction::Input, SctpEvent::Init),
            SctpState::Init
        );
    }

    #[test]
    fn timeouts_defaults_and_ipvsadm() {
        let mut t = Timeouts::default();
        let secs: Vec<u64> = TcpState::ALL.iter().map(|s| t.tcp(*s).as_secs()).collect();
        assert_eq!(secs, [2, 900, 120, 60, 120, 120, 10, 60, 30, 120, 120]);
        assert_eq!(t.udp(), Duration::from_secs(300));
        assert_eq!(t.udp_last(), Duration::from_secs(2));
        let sctp: Vec<u64> = SctpState::ALL
            .iter()
            .map(|s| t.sctp(*s).as_secs())
            .collect();
        assert_eq!(sctp, [2, 4, 61, 61, 61, 61, 61, 61, 900, 61, 61, 61, 4, 61]);
        assert_eq!(t.ipvsadm(), (900, 120, 300));
        t.set_ipvsadm(0, 30, 0);
        assert_eq!(t.ipvsadm(), (900, 30, 300));
        t.set_ipvsadm(3600, 0, 60);
        assert_eq!(t.ipvsadm(), (3600, 30, 60));
        assert_eq!(t.tcp(TcpState::TimeWait), Duration::from_secs(120));
        t.set_ipvsadm(u32::MAX, 0, 0);
        assert_eq!(
            t.tcp(TcpState::Established),
            Duration::from_millis(u64::from(u32::MAX))
        );
    }

    fn arb_dir() -> impl Strategy<Value = Direction> {
        prop_oneof![
            Just(Direction::Input),
            Just(Direction::Output),
            Just(Direction::InputOnly)
        ]
    }

    proptest! {
        #[test]
        fn tcp_matches_spec_on_random_walks(
            steps in proptest::collection::vec((arb_dir(), any::<u8>()), 0..64),
            secure in any::<bool>(),
        ) {
            let mut s = TcpState::None;
            for (d, bits) in steps {
                let f = TcpFlags::from_bits(bits);
                let next = tcp_next(s, d, f, secure);
                prop_assert_eq!(next, spec_next(s, d, f, secure));
                s = next;
            }
        }

        /// Active/inactive accounting as the director does it: a new conn
        /// counts inactive, moves when `is_active()` flips, leaves on close.
        #[test]
        fn active_inactive_counters_balance(
            ops in proptest::collection::vec((0u8..4, any::<u8>(), arb_dir(), any::<u8>()), 0..200),
        ) {
            let mut conns: Vec<TcpState> = Vec::new();
            let (mut active, mut inactive) = (0i64, 0i64);
            for (op, pick, d, bits) in ops {
                match op {
                    0 => { conns.push(TcpState::None); inactive += 1; }
                    1 if !conns.is_empty() => {
                        let i = pick as usize % conns.len();
                        let s = conns.swap_remove(i);
                        if s.is_active() { active -= 1 } else { inactive -= 1 }
                    }
                    _ if !conns.is_empty() => {
                        let i = pick as usize % conns.len();
                        let old = conns[i];
                        let new = tcp_next(old, d, TcpFlags::from_bits(bits), false);
                        match (old.is_active(), new.is_active()) {
                            (false, true) => { active += 1; inactive -= 1; }
                            (true, false) => { active -= 1; inactive += 1; }
                            _ => {}
                        }
                        conns[i] = new;
                    }
                    _ => {}
                }
                prop_assert!(active >= 0 && inactive >= 0);
                prop_assert_eq!(active + inactive, conns.len() as i64);
                prop_assert_eq!(active, conns.iter().filter(|s| s.is_active()).count() as i64);
            }
        }
    }
}
