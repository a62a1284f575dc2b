//! `sandgraph test` (being built: see issue 14).

use std::process::ExitCode;

use crate::exit::Failure;

/// `sandgraph test`
#[derive(clap::Args)]
pub struct TestArgs {}

pub async fn test(_args: TestArgs) -> Result<ExitCode, Failure> {
    Err(Failure::internal("`sandgraph test` is not built yet"))
}
