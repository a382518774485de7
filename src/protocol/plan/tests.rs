//! Unit tests of the planner (P28-P30).
