//! A bare RESP server for profiling (`valgrind --tool=callgrind`, `perf`)
//! without the rest of the CLI: `resp_server [--port N] [--config FILE]`.
//! Prints `listening on ADDR` and serves until killed.

use roost_resp::{Config, Server};

fn main() {
    let mut config = Config::default();
    let mut port = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--port" => port = args.next().and_then(|p| p.parse::<u16>().ok()),
            "--config" => {
                let path = args.next().expect("--config FILE");
                config = Config::from_file(std::path::Path::new(&path)).expect("config");
            }
            other => panic!("unknown argument `{other}`"),
        }
    }
    if let Some(port) = port {
        config.bind.set_port(port);
    }
    let server = Server::spawn(config).expect("server starts");
    println!("listening on {}", server.addr());
    server.wait();
}
