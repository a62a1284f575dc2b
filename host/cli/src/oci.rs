//! `sandgraph push/pull` (being built: see issue 14).

use std::process::ExitCode;

use crate::exit::Failure;

/// `sandgraph push`
#[derive(clap::Args)]
pub struct PushArgs {}

pub async fn push(_args: PushArgs) -> Result<ExitCode, Failure> {
    Err(Failure::internal("`sandgraph push` is not built yet"))
}

/// `sandgraph pull`
#[derive(clap::Args)]
pub struct PullArgs {}

pub async fn pull(_args: PullArgs) -> Result<ExitCode, Failure> {
    Err(Failure::internal("`sandgraph pull` is not built yet"))
}
