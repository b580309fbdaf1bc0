/// Why a TCP connect (`TCPConnector`) failed.
public enum TCPConnectFailure: Error {
    case timedOut
    /// The system's reason.
    case failed(String)
}
