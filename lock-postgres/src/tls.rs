//! How connections are opened: plain TCP (or a Unix socket), as the URL says.

use tokio_postgres::{Client, NoTls};

use crate::connection::Drive;

/// The transport security of the backend's connections.
#[derive(Clone, Default)]
pub(crate) enum Tls {
    /// No TLS: a URL asking for it (`sslmode=require`) is refused by the client library.
    #[default]
    Plain,
}

impl Tls {
    /// Opens a connection with `config`: its client, and the connection to drive.
    pub(crate) async fn connect(
        &self,
        config: &tokio_postgres::Config,
    ) -> Result<(Client, Box<dyn Drive>), tokio_postgres::Error> {
        match self {
            Tls::Plain => {
                let (client, connection) = config.connect(NoTls).await?;
                Ok((client, Box::new(connection)))
            }
        }
    }
}
