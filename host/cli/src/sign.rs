//! `sandgraph lock/sign/verify/keygen` (being built: see issue 14).

use std::process::ExitCode;

use crate::exit::Failure;

/// `sandgraph lock`
#[derive(clap::Args)]
pub struct LockArgs {}

pub async fn lock(_args: LockArgs) -> Result<ExitCode, Failure> {
    Err(Failure::internal("`sandgraph lock` is not built yet"))
}

/// `sandgraph sign`
#[derive(clap::Args)]
pub struct SignArgs {}

pub async fn sign(_args: SignArgs) -> Result<ExitCode, Failure> {
    Err(Failure::internal("`sandgraph sign` is not built yet"))
}

/// `sandgraph verify`
#[derive(clap::Args)]
pub struct VerifyArgs {}

pub async fn verify(_args: VerifyArgs) -> Result<ExitCode, Failure> {
    Err(Failure::internal("`sandgraph verify` is not built yet"))
}

/// `sandgraph keygen`
#[derive(clap::Args)]
pub struct KeygenArgs {}

pub async fn keygen(_args: KeygenArgs) -> Result<ExitCode, Failure> {
    Err(Failure::internal("`sandgraph keygen` is not built yet"))
}
