//! allot simulator.
