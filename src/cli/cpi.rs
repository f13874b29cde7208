//! `fleet-updater cpi`: one CPI request from stdin answered on stdout, as a BOSH CPI
//! executable does. A request that cannot be read is answered with the protocol's error,
//! so that the caller learns why.

use std::io::{Read, Write};
use std::path::Path;

use fleet_updater::cpi::protocol::{Request, Response, kinds};

use super::CliError;
use super::error::DONE;

/// The properties a configuration file gives: a JSON object.
fn properties(path: &Path) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    let text = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    match serde_json::from_slice(&text) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        Ok(_) => Err(format!("{} is not a JSON object", path.display())),
        Err(e) => Err(format!("{} is not JSON: {e}", path.display())),
    }
}

pub async fn serve_one(config: Option<&Path>) -> Result<u8, CliError> {
    let mut input = Vec::new();
    std::io::stdin()
        .read_to_end(&mut input)
        .map_err(|e| CliError::Show(format!("cpi: cannot read the request: {e}")))?;
    let configured = match config.map(properties).transpose() {
        Ok(map) => map.unwrap_or_default(),
        Err(e) => {
            return answer(Response::failed(
                kinds::CLOUD_ERROR,
                e,
                false,
                String::new(),
            ));
        }
    };
    let response = match serde_json::from_slice::<Request>(&input) {
        Ok(mut request) => {
            for (key, value) in configured {
                request.context.entry(key).or_insert(value);
            }
            let program = std::env::current_exe()
                .map_err(|e| CliError::Show(format!("cpi: cannot find this program: {e}")))?;
            fleet_updater::iaas::cpi_server::handle(&request, &program).await
        }
        Err(e) => Response::failed(
            kinds::CLOUD_ERROR,
            format!("the request is not a CPI request: {e}"),
            false,
            String::new(),
        ),
    };
    answer(response)
}

fn answer(response: Response) -> Result<u8, CliError> {
    let text = serde_json::to_string(&response).expect("a response serializes");
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| CliError::Show(format!("cpi: cannot write the response: {e}")))?;
    Ok(DONE)
}
