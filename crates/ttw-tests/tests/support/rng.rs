//! A small random number generator (xorshift) for the tests that drop work
//! at random points: seeded, and the seed printed by the test, so that a
//! failing run can be repeated.

#![allow(dead_code)]

/// The generator's state; never zero.
pub struct Rng(pub u64);

impl Rng {
    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}
