import PinproxyCore
import PinproxyInterop

extension SocketDiagnostics {
    /// Why client sockets cannot be looked up in this process (a sandbox without AF_NETLINK,
    /// a kernel without inet_diag), or nil when a loopback connection of its own is found, owned
    /// by its own user. Without a loopback connection to try, opening the socket is the test.
    static func selfTestProblem() -> String? {
        let diagnostics: SocketDiagnostics
        do {
            diagnostics = try SocketDiagnostics()
        } catch {
            return error.description
        }
        guard let pair = LoopbackConnection() else { return nil }
        defer { pair.close() }
        do throws(SystemError) {
            guard let owner = try diagnostics.lookUp(local: pair.client, remote: pair.server) else {
                return "a loopback connection of pinproxy's own was not found"
            }
            guard owner.uid == CurrentProcess.effectiveUserID else { return "a loopback connection of pinproxy's own was reported as uid \(owner.uid), not \(CurrentProcess.effectiveUserID)" }
            return nil
        } catch {
            return error.description
        }
    }
}
