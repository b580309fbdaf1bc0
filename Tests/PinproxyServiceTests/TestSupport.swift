import Glibc
// SocketDiagnosticsTests reads the kernel's netlink structs through the shims' headers; once a
// file of this target imports them, the socket constants below (SOCK_DGRAM, SOCK_CLOEXEC) are
// found through that module only, so every file that uses them imports it too.
import CPinproxyShims
import Foundation
import XCTest
import PinproxyInterop

// Plain-socket helpers for the tests: the receiving end of the notify protocol, listening
// sockets, an HTTP GET client and subprocesses. Every wait is a poll(2) with a deadline.

/// A temporary directory removed at deinit.
final class TemporaryDirectory {
    let path: String

    init() throws {
        var template = Array((NSTemporaryDirectory() + "/pinproxy-service-XXXXXX").utf8CString)
        guard let created = mkdtemp(&template) else {
            throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
        }
        path = String(cString: created)
    }

    deinit {
        try? FileManager.default.removeItem(atPath: path)
    }
}

/// Fills a `sockaddr_un` for a path or an `@abstract` name and returns its length.
func unixAddress(_ address: String) -> (sockaddr_un, socklen_t) {
    var storage = sockaddr_un()
    storage.sun_family = sa_family_t(AF_UNIX)
    var bytes = Array(address.utf8)
    let abstract = bytes.first == UInt8(ascii: "@")
    if abstract { bytes[0] = 0 }
    withUnsafeMutableBytes(of: &storage.sun_path) { $0.copyBytes(from: bytes) }
    let offset = MemoryLayout<sockaddr_un>.offset(of: \sockaddr_un.sun_path)!
    return (storage, socklen_t(offset + bytes.count + (abstract ? 0 : 1)))
}

/// A bound `AF_UNIX` datagram socket playing systemd's notification socket.
final class DatagramReceiver {
    let fd: Int32
    /// The `NOTIFY_SOCKET` value naming it.
    let address: String

    init(address: String) throws {
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        self.address = address
        var (storage, length) = unixAddress(address)
        let result = withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
        }
        guard result == 0 else {
            let code = errno
            close(fd)
            throw POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO)
        }
    }

    deinit {
        close(fd)
    }

    /// The next datagram, or nil when none arrives within `timeout` seconds.
    func receive(timeout: Double = 5) -> String? {
        guard waitReadable(fd, timeout: timeout) else { return nil }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = recv(fd, &buffer, buffer.count, 0)
        guard count >= 0 else { return nil }
        return String(decoding: buffer[..<count], as: UTF8.self)
    }
}

/// Waits until `fd` is readable (or has hung up); false on timeout.
func waitReadable(_ fd: Int32, timeout: Double) -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while true {
        let remaining = deadline.timeIntervalSinceNow
        if remaining <= 0 { return false }
        var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let ready = poll(&entry, 1, Int32(min(remaining, 1) * 1000) + 1)
        if ready > 0 { return true }
        if ready < 0 && errno != EINTR { return false }
    }
}

/// A TCP socket on 127.0.0.1, bound to a free port; listening when `listen` is true.
func makeLoopbackSocket(listen shouldListen: Bool) throws -> (fd: Int32, port: UInt16) {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer -> Bool in
            bind(fd, pointer, length) == 0 && getsockname(fd, pointer, &length) == 0
        }
    }
    guard bound, !shouldListen || listen(fd, 16) == 0 else {
        let code = errno
        close(fd)
        throw POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO)
    }
    return (fd, UInt16(bigEndian: address.sin_port))
}

/// One HTTP response as read off the wire.
struct HTTPReply {
    let status: Int
    let headers: [String: String]
    let body: String
}

enum HTTPClientError: Error {
    case connectFailed(Int32)
    case timedOut
    case malformed(String)
}

/// Sends one `METHOD path HTTP/1.1` request with `Connection: close` to 127.0.0.1:`port` and
/// reads the response until the server closes, within `timeout` seconds.
func httpRequest(port: UInt16, path: String, method: String = "GET", timeout: Double = 10) throws -> HTTPReply {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { throw HTTPClientError.connectFailed(errno) }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = port.bigEndian
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
        }
    }
    guard connected == 0 else { throw HTTPClientError.connectFailed(errno) }

    let request = Array("\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".utf8)
    guard send(fd, request, request.count, Int32(MSG_NOSIGNAL)) == request.count else {
        throw HTTPClientError.malformed("short send")
    }

    var received: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 16 * 1024)
    let deadline = Date().addingTimeInterval(timeout)
    while true {
        guard waitReadable(fd, timeout: deadline.timeIntervalSinceNow) else { throw HTTPClientError.timedOut }
        let count = recv(fd, &chunk, chunk.count, 0)
        if count < 0 && errno == EINTR { continue }
        if count <= 0 { break }
        received += chunk[..<count]
    }

    let text = String(decoding: received, as: UTF8.self)
    guard let split = text.range(of: "\r\n\r\n") else { throw HTTPClientError.malformed(text) }
    let head = text[..<split.lowerBound].components(separatedBy: "\r\n")
    let statusParts = head[0].split(separator: " ")
    guard statusParts.count >= 2, statusParts[0].hasPrefix("HTTP/1."), let status = Int(statusParts[1]) else {
        throw HTTPClientError.malformed(head[0])
    }
    var headers: [String: String] = [:]
    for line in head.dropFirst() {
        guard let colon = line.firstIndex(of: ":") else { continue }
        headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
    }
    return HTTPReply(status: status, headers: headers, body: String(text[split.upperBound...]))
}

/// What a finished subprocess printed.
struct ProcessOutput {
    let status: Int32
    let stdout: String
    let stderr: String
}

/// Runs `executable` with `arguments` (stdin from `input`), waiting at most `timeout` seconds.
func runProcess(
    _ executable: String, _ arguments: [String], input: String? = nil,
    environment: [String: String]? = nil, timeout: Double = 120
) throws -> ProcessOutput {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    if let environment { process.environment = environment }
    let stdout = Pipe(), stderr = Pipe(), stdin = Pipe()
    process.standardOutput = stdout
    process.standardError = stderr
    process.standardInput = stdin
    // Read both pipes while the process runs, so a large output cannot block it.
    final class Collected: @unchecked Sendable { var out = Data(), err = Data() }
    let collected = Collected()
    let group = DispatchGroup()
    group.enter()
    DispatchQueue.global().async {
        collected.out = stdout.fileHandleForReading.readDataToEndOfFile()
        group.leave()
    }
    group.enter()
    DispatchQueue.global().async {
        collected.err = stderr.fileHandleForReading.readDataToEndOfFile()
        group.leave()
    }
    try process.run()
    if let input { stdin.fileHandleForWriting.write(Data(input.utf8)) }
    try stdin.fileHandleForWriting.close()
    if group.wait(timeout: .now() + timeout) == .timedOut {
        process.terminate()
        throw HTTPClientError.timedOut
    }
    process.waitUntilExit()
    return ProcessOutput(status: process.terminationStatus,
                         stdout: String(decoding: collected.out, as: UTF8.self),
                         stderr: String(decoding: collected.err, as: UTF8.self))
}

/// The first of `names` found on PATH (or as an absolute path), nil when none is.
func findExecutable(_ names: String...) -> String? {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
    for name in names {
        if name.hasPrefix("/") {
            if FileManager.default.isExecutableFile(atPath: name) { return name }
            continue
        }
        for directory in path.split(separator: ":") {
            let candidate = "\(directory)/\(name)"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
    }
    return nil
}

/// The repository root (this file is Tests/PinproxyServiceTests/TestSupport.swift).
let repositoryRoot: String = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

/// An `EventLoop` running on its own thread, for tests of code that needs a running loop.
final class RunningLoop: @unchecked Sendable {
    let loop: EventLoop
    private let finished = DispatchSemaphore(value: 0)
    private var started = false

    init() throws {
        loop = try EventLoop()
    }

    /// Runs the loop on a new thread until `stop()`.
    func start() {
        precondition(!started, "started twice")
        started = true
        let thread = Thread { [loop, finished] in
            loop.run()
            finished.signal()
        }
        thread.start()
    }

    /// Stops the loop and waits for its thread to return.
    func stop() {
        guard started else { return }
        started = false
        loop.stop()
        finished.wait()
    }
}
