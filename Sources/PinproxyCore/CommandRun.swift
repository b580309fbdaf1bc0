/// Runs a command to completion for the command-line tools (`nft` for `pinproxy egress`,
/// `update-ca-certificates` for `pinproxy ca --install`), blocking the calling thread: never
/// used by the daemon. The child inherits the environment; it gets `input` on stdin, and its
/// stdout and stderr are collected. Interop runs it (`CommandRun.run`).
public enum CommandRun {
    /// How the command ended, and what it wrote.
    public struct Result: Sendable {
        /// The exit status, or 128 + the signal that ended it.
        public let status: Int32
        public let output: String
        public let error: String

        package init(status: Int32, output: String, error: String) {
            self.status = status
            self.output = output
            self.error = error
        }
    }
}
