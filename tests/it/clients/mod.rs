//! The clients a worker's author starts from, against the real binary: the Rust client crate
//! (clients/rust), the Python package (clients/python) and the lock-service recipes
//! (examples/recipes, tests/e2e/recipes.sh).

mod python;
mod recipes;
mod rust;
