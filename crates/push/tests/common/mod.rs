//! A mock host for the tests: records sends, timers and completions.

#![allow(dead_code)]

use std::collections::BTreeMap;

use txcast_push::{HookError, Hooks};

#[derive(Debug, Default)]
pub struct Mock {
    pub now: u64,
    /// Every accepted send, in order.
    pub sends: Vec<(u64, Vec<u8>)>,
    /// Armed timers: token -> deadline.
    pub timers: BTreeMap<u64, u64>,
    /// Every timer arming, in order: (after_ns, token).
    pub armed: Vec<(u64, u64)>,
    pub cancelled: Vec<u64>,
    pub completions: Vec<(i32, Vec<u8>)>,
    /// Refuse sends with this error.
    pub refuse_sends: Option<HookError>,
    /// Refuse timers with this error.
    pub refuse_timers: Option<HookError>,
}

impl Hooks for Mock {
    fn send(&mut self, dest: u64, msg: &[u8]) -> Result<(), HookError> {
        if let Some(e) = self.refuse_sends {
            return Err(e);
        }
        self.sends.push((dest, msg.to_vec()));
        Ok(())
    }
    fn now_ns(&self) -> u64 {
        self.now
    }
    fn arm_timer(&mut self, after_ns: u64, token: u64) -> Result<(), HookError> {
        if let Some(e) = self.refuse_timers {
            return Err(e);
        }
        self.armed.push((after_ns, token));
        self.timers.insert(token, self.now + after_ns);
        Ok(())
    }
    fn cancel_timer(&mut self, token: u64) -> bool {
        self.cancelled.push(token);
        self.timers.remove(&token).is_some()
    }
    fn complete(&mut self, status: i32, result: &[u8]) {
        self.completions.push((status, result.to_vec()));
    }
}

/// A packed txcast address: instance | site << 16 | server_type << 32 | server_instance << 48.
pub fn addr(site: u16, server_type: u16, server_instance: u16) -> u64 {
    1 | u64::from(site) << 16 | u64::from(server_type) << 32 | u64::from(server_instance) << 48
}
