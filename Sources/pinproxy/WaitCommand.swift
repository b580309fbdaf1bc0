import Glibc
import ArgumentParser
import FoundationEssentials
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy

/// `pinproxy wait`: until servers started in the background listen, for scripts that go on to use them.
struct WaitCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "wait",
        abstract: "Wait until something listens on each ADDRESS:PORT (a daemon or origin started in the background).",
        discussion: """
            Reads the kernel's listening sockets (/proc/net/tcp and tcp6): no connection is made. A client that \
            connects once this returns is queued by the kernel until the server accepts it. Exit 0 once all \
            listen, 1 after --timeout, 2 on usage errors.
            """
    )

    @Option(name: .long, help: "Seconds to wait at most.")
    var timeout: Double = 30

    @Argument(help: ArgumentHelp("The addresses, e.g. 127.0.0.1:3128 or [::1]:3128.", valueName: "ADDRESS:PORT"))
    var addresses: [String]

    /// How often the socket tables are read.
    static let interval: TimeInterval = 0.02

    func validate() throws {
        if addresses.isEmpty { throw ValidationError("give at least one ADDRESS:PORT") }
        for text in addresses where ListenAddress(text) == nil {
            throw ValidationError("\"\(text)\" is not ADDRESS:PORT (for example 127.0.0.1:3128 or [::1]:3128)")
        }
        if !(timeout > 0) { throw ValidationError("--timeout must be positive") }
    }

    func run() throws {
        let deadline = Date().addingTimeInterval(timeout)
        var waiting = addresses.compactMap(ListenAddress.init)
        while true {
            waiting.removeAll { !ListeningSockets.inodes(overlapping: SocketAddress(address: $0.address, port: $0.port)).isEmpty }
            if waiting.isEmpty { return }
            if Date() >= deadline {
                printError("pinproxy wait: nothing listens on \(waiting.map(\.description).joined(separator: ", ")) after \(timeout.secondsText) s")
                throw ExitCode(1)
            }
            usleep(UInt32(Self.interval * 1_000_000))
        }
    }
}
