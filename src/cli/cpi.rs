//! `fleet-updater cpi`: one CPI request from stdin answered on stdout, as a BOSH CPI
//! executable does. A request that cannot be read is answered with the protocol's error,
//! so that the caller learns why.

use std::io::{Read, Write};

use fleet_updater::cpi::protocol::{Request, Response, kinds};

use super::CliError;
use super::error::DONE;

pub async fn serve_one() -> Result<u8, CliError> {
    let mut input = Vec::new();
    std::io::stdin()
        .read_to_end(&mut input)
        .map_err(|e| CliError::Show(format!("cpi: cannot read the request: {e}")))?;
    let response = match serde_json::from_slice::<Request>(&input) {
        Ok(request) => {
            let program = std::env::current_exe()
                .map_err(|e| CliError::Show(format!("cpi: cannot find this program: {e}")))?;
            fleet_updater::vm::cpi_server::handle(&request, &program).await
        }
        Err(e) => Response::failed(
            kinds::CLOUD_ERROR,
            format!("the request is not a CPI request: {e}"),
            false,
            String::new(),
        ),
    };
    let text = serde_json::to_string(&response).expect("a response serializes");
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| CliError::Show(format!("cpi: cannot write the response: {e}")))?;
    Ok(DONE)
}
