//! Raid, the distributed database of Bhargava, Mafla & Riedl (*Communication in the Raid
//! Distributed Database System*), as a replicated DebitCredit database on txcast: the
//! benchmark of Mafla & Bhargava (*Implementation and Performance of a Communication Facility
//! for Distributed Transaction Processing*, §3.4) on every site, read-one-write-all-available
//! over views agreed by a majority, with two-phase commit and a durable redo log.
//!
//! - [`db`]: one site's copy of the database (branches, tellers, accounts, history).
//! - [`lock`]: the concurrency controller's lock table (strict 2PL, wait-die).
//! - [`msg`]: messages between sites and log records.
//! - [`log`]: the log's framing on disk.
//! - [`site`]: one site, sans-IO (AD, AC, CC, AM and RC in one state machine); its views
//!   and snapshots in `site/view.rs`.
//! - [`driver`]: a site on a txcast port with its log in a file (group commit), and its
//!   clients; [`cluster`] runs several in one process.
//! - [`client`]: clients of a site in other processes ([`client::RaidClient`]).
//! - [`remote`]: a load generator against a running cluster, with its audit.
//! - [`stats`]: the latency histogram of the reports.

pub mod client;
pub mod cluster;
pub mod db;
pub mod driver;
pub mod lock;
pub mod log;
pub mod msg;
pub mod remote;
pub mod site;
pub mod stats;

pub use db::{Db, DbError, HistoryRow, Key, Op, Scale, Table, Totals, Write};
pub use site::{Cause, ConfigError, Counters, Event, Site, SiteConfig, SubmitError, Transfer};

/// A transaction attempt's id: its origin site, the origin's incarnation, and a number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TxnId {
    pub site: u16,
    pub incarnation: u32,
    pub seq: u64,
}
