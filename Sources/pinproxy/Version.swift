/// The version `pinproxy --version` prints.
let pinproxyVersion = "0.1.0"
