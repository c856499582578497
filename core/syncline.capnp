# The one wire schema of Syncline. Every message is a Header (this file) followed by zero or
# more raw payload frames (keys as little-endian uint64, values as float32) that travel as
# separate ZeroMQ frames so that they are neither copied into nor re-encoded by Cap'n Proto.
@0xfc2b57ed042a86a0;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("syncline::wire");

enum MsgType {
  invalid @0;
  # Control plane: node <-> coordinator.
  register @1;      # node -> coordinator: body.register
  registered @2;    # coordinator -> node: body.nodeTable (sent once every node has registered)
  ready @3;         # node -> coordinator: handlers are in place
  start @4;         # coordinator -> node: every node is ready
  heartbeat @5;     # node -> coordinator, and the coordinator's acknowledgement
  progress @6;      # worker -> coordinator: body.progress
  workerDone @7;    # worker -> coordinator: body.workerStats
  evaluate @8;      # coordinator -> worker 0: every worker is done, evaluate the final model
  result @9;        # worker 0 -> coordinator: body.evaluation
  shutdown @10;     # coordinator -> node: exit cleanly (servers answer with serverStats first)
  serverStats @11;  # server -> coordinator: body.serverStats
  nodeDown @12;     # coordinator -> node: body.nodeDown
  abort @13;        # either way: the job cannot go on; `message` says why

  # Data plane: worker <-> server.
  declareTable @14; # body.table; idempotent for an identical spec
  push @15;         # keys frame (sparse) or rangeBegin (dense), then a values frame
  pull @16;         # keys frame or [rangeBegin, rangeEnd); the reply carries a values frame
  pushPull @17;     # a push, then a pull of the same keys
  clock @18;        # the sender has finished iteration `clock - 1`; no reply unless it is an error
  finish @19;       # the sender leaves the clock set
  reply @20;        # success; carries values for pulls
  error @21;        # failure: statusCode and message

  # Data plane: worker <-> worker (gossip/). clock = step, rank = sender, weight = push-sum
  # weight, rangeBegin = the sender's degree this step, codec/valueCount describe the one
  # values frame (the sender's parameters). Peers also reuse nodeDown (a peer declared dead,
  # clock = the first step without it), finish (the sender leaves from step clock) and error
  # (statusCode FAILED_PRECONDITION: the sender has already finished step clock).
  gossip @22;

  # Checkpoints: node -> coordinator, the node's part of checkpoint `clock` is on disk (its
  # receipt written), or, with statusCode set, could not be written (`message` says why).
  checkpointed @23;
  # coordinator -> node: checkpoint when every worker has finished `clock` clocks (time-based
  # checkpoints: the coordinator picks a clock just ahead of the fastest worker).
  checkpoint @24;
  # server -> coordinator, about once a second while serving: body.serverStats so far (the
  # launcher writes the embedding tables' figures to OUT/embedding.csv).
  serverProgress @25;

  # Collectives among workers (collective/): rank = sender, clock = the collective's sequence
  # number, table = its phase, rangeBegin = step, rangeEnd = segment, codec = 0 for float32
  # values or 1 for float16, valueCount = values in the one values frame.
  collective @26;

  # In-place recovery (docs/FAULT_TOLERANCE.md). coordinator -> every surviving node: a node
  # failed and is being replaced; stop, and restore the checkpoint in folder `message` at clock
  # `clock`, as generation `generation`. node -> coordinator: rolledBack, restored (generation
  # echoed). coordinator -> every node: resume, every node has restored generation `generation`.
  rollback @27;
  rolledBack @28;
  resume @29;

  # Joins (docs/FAULT_TOLERANCE.md, "Joining a running job"). A worker started with --join asks
  # for a rank: join, body.register, from control endpoint "joiner.ctl"; the coordinator
  # answers join with `rank` set (or error), and the worker then registers under that rank.
  # coordinator -> each training worker: cut (rank = the joiner); worker -> coordinator: cut,
  # `clock` = the first iteration it will not prepare until it hears the arrival.
  # coordinator -> every server: arrival, body.arrival; each takes the joiner into its clock
  # set at firstClock and answers arrival with `clock` = the joiner. Then coordinator -> every
  # worker: arrival (the joiner hears every earlier departure and arrival, then its own, right
  # after its node table).
  join @30;
  cut @31;
  arrival @32;

  # worker -> coordinator: body.evaluation of the model on the test set after `clock`
  # iterations, while the job trains (--eval-every).
  heldOut @33;
  # Peers of a generation after a rollback (collective and gossip workers; in-place recovery):
  # each re-forms on endpoints of its own for the new generation, found through the
  # coordinator rather than over connections of the undone timeline. worker -> coordinator:
  # peerAddress, `generation` = the job's, `message` = where this worker's endpoint of that
  # generation listens. coordinator -> every worker, once every worker has sent its own for the
  # current generation: peerAddress, `generation`, body.nodeTable's nodes = every worker's
  # (rank, id, address).
  peerAddress @34;

  # Under ASP with hand-over, a worker that has trained every batch of its plan stays to take a
  # lost worker's remaining batches (one lost just before the others finish would otherwise
  # leave them untrained). worker -> coordinator: workerIdle. coordinator -> each idle worker,
  # once every worker is idle, done or down: release (it finishes, and reports workerDone).
  workerIdle @35;
  release @36;

  # Secure aggregation (--secure-aggregation; privacy/secagg_protocol.h), worker <-> server 0:
  # one request per stage of a federated round. clock = the round, table = the stage
  # (SecAggStage's ordinal), payload 0 = a SecAggMessage as a flat Cap'n Proto array, payload 1
  # (masked input only) = the masked vector as little-endian uint32. The server answers once
  # the stage closes: reply with payload 0 = a SecAggMessage, or error (FAILED_PRECONDITION:
  # the round aborted, or the stage had closed; INVALID_ARGUMENT: a refused request).
  secAgg @37;
}

enum Role {
  coordinator @0;
  server @1;
  worker @2;
}

struct Header {
  type @0 :MsgType;
  role @1 :Role;           # sender's role
  rank @2 :Int32;          # sender's rank within its role
  requestId @3 :UInt64;    # echoed in the reply
  table @4 :UInt32;
  clock @5 :Int64;         # pulls: the iteration the reader is in; pushes: the iteration the gradient is from
  weight @6 :Float32;      # pushes: examples behind the gradient sum (the server divides by it)
  keyCount @7 :UInt64;     # entries in the keys frame (0: dense range or no keys)
  valueCount @8 :UInt64;   # entries in the values frame
  rangeBegin @9 :UInt64;   # dense tables: first key of the range
  rangeEnd @10 :UInt64;    # dense tables: one past the last key
  codec @11 :UInt8;        # 0 = raw float32 values, else the CodecKind of the values' block
  statusCode @12 :Int32;   # error replies: an absl::StatusCode
  message @13 :Text;       # error replies and aborts: what went wrong

  body :union {
    none @14 :Void;
    register @15 :Register;
    nodeTable @16 :NodeTable;
    progress @17 :Progress;
    workerStats @18 :WorkerStats;
    evaluation @19 :Evaluation;
    serverStats @20 :ServerStats;
    nodeDown @21 :NodeDown;
    table @22 :TableSpec;
    arrival @29 :Arrival;
  }

  staleness @23 :Int64;    # pull replies: iterations of updates the served values may lack
  keyCoding @24 :UInt8;    # 0 = keys frame of little-endian uint64; 1 = compact keys
                           # (varint gaps, compression/sparse_rows.h); 2 = keysOf's
  pullCodec @25 :UInt8;    # pulls: 0 = float32 rows; else answer with compressed deltas in this
                           # codec (--compress-pull; the reply's keyCount = rows evicted)
  keysOf @26 :UInt64;      # pushes with keyCoding 2: the requestId of a recent pull (with
                           # compact keys) of this table whose keys the push reuses; its keys
                           # frame is empty
  heldCoding @27 :UInt8;   # sparse pushes: 0 = each row is one push's gradient; 1 = a third
                           # frame of held counts (varints, compression/sparse_rows.h): how
                           # many pushes each row's value sums, applied as that many steps
  generation @28 :UInt32;  # data plane: the job's rollbacks so far when the request was made; a
                           # server drops a request of an older generation (nothing answers it),
                           # and its error replies carry its own
  wallMicros @30 :Int64;   # heartbeats: the sender's wall clock when it sent, in microseconds
                           # since the epoch (the coordinator's answer carries its own), from
                           # which a node measures its clock's offset (trace files)
}

struct Register {
  dataAddress @0 :Text;    # where the node's data endpoint listens ("" for workers)
  host @1 :Text;
  pid @2 :Int32;
  version @3 :Text;        # the node's build (core/version.h); the coordinator refuses another
  worldSize @4 :Int32;     # ranks its cluster launcher started (0: unknown); checked likewise
  metricsPort @5 :UInt16;  # where the node serves /metrics, on its data address's host (0: it
                           # does not)
}

struct NodeInfo {
  role @0 :Role;
  rank @1 :Int32;
  id @2 :Text;             # routing id of the data endpoint
  address @3 :Text;
}

struct NodeTable {
  nodes @0 :List(NodeInfo);
  numServers @1 :Int32;
  numWorkers @2 :Int32;
  staleness @3 :Int64;     # -1 = unbounded (ASP), 0 = BSP
  heartbeatIntervalMs @4 :Int32;
  heartbeatTimeoutMs @5 :Int32;
  job @6 :JobSpec;         # the whole job, as the launcher parsed and validated it
  version @7 :Text;        # the coordinator's build
  generation @8 :UInt32;   # rollbacks so far (a node that replaces a failed one joins at it)
  restore @9 :Text;        # a replacement node: the checkpoint folder it restores from
  maxWorkers @10 :Int32;   # the most workers the job may have (joins); 0: numWorkers
}

struct Progress {
  clock @0 :Int64;
  epoch @1 :Int32;
  trainLoss @2 :Float64;   # mean over the examples since the last report
  examples @3 :UInt64;     # examples since the last report
  totalSteps @4 :Int64;    # steps this worker will run
  staleness @5 :Float64;   # mean staleness served to this worker since the last report
  consensus @6 :Float64;   # gossip: mean distance of this worker's model from its neighbours'
  stepSeconds @7 :StepSeconds;  # the split of the iterations since the last report
  bytes @8 :UInt64;        # bytes this worker has pushed and pulled since it started
}

# Where a worker's training iterations spent their time, in seconds (worker/trainer.h's
# StepTimes): disjoint parts whose sum is the iterations' time.
struct StepSeconds {
  steps @0 :Int64;         # the iterations these seconds cover
  batch @1 :Float64;       # the next batch and its unique keys
  upload @2 :Float64;      # copies to the model's device (0 on the CPU)
  compute @3 :Float64;     # the model's loss and gradients, less its copies
  compress @4 :Float64;    # the sync backend's codecs
  download @5 :Float64;    # copies back from the model's device (0 on the CPU)
  network @6 :Float64;     # the rest of the backend's calls: the wire and waiting for others
}

struct WorkerStats {
  steps @0 :Int64;
  bytesPushed @1 :UInt64;
  bytesPulled @2 :UInt64;
  examples @3 :UInt64;
  stepSeconds @4 :StepSeconds;  # the split of the iterations of its last run
  device @5 :Text;              # where it computed: "cpu", "cuda:0"
  # Iterations this process trained (steps is the clock it stopped at, which counts a joiner's
  # entry clock and a resumed checkpoint's); -1: as steps.
  stepsTrained @6 :Int64 = -1;
  # An elastic all-reduce's count of the examples whose gradients the model holds (every
  # member's, the departed ones' included, as the survivors summed them); -1: not counted.
  examplesInModel @7 :Float64 = -1;
}

struct Evaluation {
  loss @0 :Float64;
  auc @1 :Float64;         # binary models, else -1
  accuracy @2 :Float64;    # multiclass models, else -1
  examples @3 :UInt64;
  seconds @4 :Float64;     # how long the evaluation took
}

struct ServerStats {
  bytesIn @0 :UInt64;
  bytesOut @1 :UInt64;
  requests @2 :UInt64;
  rejected @3 :UInt64;     # malformed or invalid requests answered with an error
  stalenessHistogram @4 :List(UInt64);  # [k] = pulls served with staleness k (last bucket: >=)
  parkedPulls @5 :UInt64;
  embedding @6 :EmbeddingStats;  # summed over the server's embedding tables
  checkpoints @7 :UInt64;        # checkpoints this server started
  checkpointPauseSeconds @8 :Float64;  # time serving stopped for them (capture, waiting)
  rounds @9 :UInt64;             # fedavg rounds aggregated
  roundsShort @10 :UInt64;       # of them, closed at the timeout without every picked client
  clientsMissing @11 :UInt64;    # picked clients absent from the rounds they were picked for
  updatesLate @12 :UInt64;       # updates that came after their round had closed (dropped)
  shortRounds @13 :List(Int64);  # the first 1000 rounds closed short of clients
  examplesTrained @14 :Float64;  # examples of the iterations workers finished (their clocks'
                                 # weights): under BSP those whose gradients reached the model
  lostWorkers @15 :List(LostWorker);  # workers dropped while the job went on, at what clock
}

struct LostWorker {
  worker @0 :Int32;
  clock @1 :Int64;  # the iterations this server had seen it finish
}

struct EmbeddingStats {
  tables @0 :UInt32;
  rowsInMemory @1 :UInt64;
  rowsOnDisk @2 :UInt64;
  admitted @3 :UInt64;
  rejected @4 :UInt64;
  expired @5 :UInt64;
  memoryHits @6 :UInt64;
  diskHits @7 :UInt64;
  evictions @8 :UInt64;
  memoryBytes @9 :UInt64;
  memoryBudgetBytes @10 :UInt64;
}

struct NodeDown {
  role @0 :Role;
  rank @1 :Int32;
  reason @2 :Text;
  # A worker that left a job that goes on: the iterations it finished as the coordinator last
  # heard (its remaining batches are handed over from there), and the workers still training
  # that take them (empty: none, or the job's mode hands nothing over).
  clock @3 :Int64;
  takers @4 :List(Int32);
}

# A worker joined: the donors give it every (donors + 1)-th batch of their plans from their
# cuts on (worker/work_plan.h); its clocks count from firstClock.
struct Arrival {
  worker @0 :Int32;
  firstClock @1 :Int64;
  donors @2 :List(Int32);
  cuts @3 :List(Int64);
}

enum TableKind {
  dense @0;    # keys 0..numKeys-1, sharded by contiguous key range
  sparse @1;   # 64-bit keys below numKeys (0 = any), sharded by hash
}

enum OptimizerKind {
  sgd @0;
  adagrad @1;
  adam @2;
  ftrl @3;     # FTRL-Proximal (McMahan et al. 2013): per-weight z and n, L1 gives exact zeros
  momentum @4; # heavy ball (FedAvgM's server rule)
  yogi @5;     # Zaheer et al. 2018
}

struct TableSpec {
  id @0 :UInt32;
  kind @1 :TableKind;
  numKeys @2 :UInt64;
  dim @3 :UInt32;          # floats per key
  optimizer @4 :OptimizerKind;
  learningRate @5 :Float32;
  l2 @6 :Float32;
  initScale @7 :Float32;   # rows start uniform in [-initScale, initScale], 0 = zeros
  seed @8 :UInt64;
  maxRows @9 :UInt64;      # sparse: rows a shard may hold (0 = default bound)
  l1 @10 :Float32;         # FTRL: L1 strength
  ftrlBeta @11 :Float32;   # FTRL: the beta of its per-coordinate learning rate
  # How a declaration that creates a dense table sets its values (not part of the table's spec:
  # declarations that differ only in it are the same table).
  initial @12 :TableInit;
  epsilon @13 :Float32 = 1e-8;  # Adagrad and Adam
  beta1 @14 :Float32 = 0.9;     # Adam
  beta2 @15 :Float32 = 0.999;   # Adam
}

enum TableInit {
  default @0;      # initScale and seed
  values @1;       # the declaration's values frame: this server's range, numKeys x dim floats
  awaitValues @2;  # answered once a declaration with values (or a default one) has made it
}

# The job: every setting of syncline/job_spec.h, as the coordinator hands it to each node at
# registration (job/job_wire.cc converts; nodes validate what they receive).
enum SyncKind {
  bsp @0;
  asp @1;
  ssp @2;
  gossip @3;
  allreduce @4;
  fedavg @5;
  hybrid @6;               # embeddings on the servers (ASP/SSP), dense layers all-reduced
}

enum AllReduceAlgorithm {
  auto @0;
  ring @1;
  doubling @2;
  hierarchical @3;
  halving @4;              # Rabenseifner's: recursive halving, then recursive doubling
}

enum GossipTopology {
  ring @0;
  exponential @1;
  random @2;
}

enum ModelKind {
  logreg @0;
  softmax @1;
  ctr @2;
  mlp @3;
}

enum DataFormat {
  detect @0;   # from the file name and content
  libsvm @1;
  csv @2;
  criteo @3;
}

enum IndexBase {
  detect @0;
  zero @1;
  one @2;
}

struct JobSpec {
  servers @0 :Int32;
  workers @1 :Int32;
  syncKind @2 :SyncKind;
  staleness @3 :Int64;
  gossipTopology @4 :GossipTopology;
  gossipAsync @5 :Bool;
  model @6 :ModelKind;
  classes @7 :Int32;
  embeddingDim @8 :Int32;
  obsoleteHidden @9 :Int32;        # replaced by hiddenLayers
  train @10 :Text;
  test @11 :Text;
  format @12 :DataFormat;
  indexBase @13 :IndexBase;
  paramsOut @14 :Text;
  epochs @15 :Int32;
  batchSize @16 :Int32;
  optimizer @17 :OptimizerKind;
  learningRate @18 :Float64;
  l2 @19 :Float64;
  codec @20 :UInt8;
  codecRatio @21 :Float64;
  codecChunk @22 :UInt32;
  logEvery @23 :Int32;
  seed @24 :UInt64;
  requestTimeoutS @25 :Float64;
  heartbeatIntervalS @26 :Float64;
  heartbeatTimeoutS @27 :Float64;
  peerTimeoutS @28 :Float64;
  stragglerRank @29 :Int32;
  stragglerFactor @30 :Float64;
  jitterProbability @31 :Float64;
  jitterFactor @32 :Float64;
  delayRank @33 :Int32;
  delayMs @34 :Float64;
  minStepMs @35 :Float64;
  embeddingDir @36 :Text;
  embeddingMemoryRows @37 :UInt64;
  embeddingMemoryBytes @38 :UInt64;
  embeddingAdmitAfter @39 :Int32;
  embeddingExpireSteps @40 :Int32;
  updateThreads @41 :Int32;
  checkpointDir @42 :Text;
  checkpointEvery @43 :Int32;
  checkpointSeconds @44 :Float64;
  checkpointKeep @45 :Int32;
  restore @46 :Text;
  allreduceAlgorithm @47 :AllReduceAlgorithm;
  readAhead @48 :Bool;
  maxReplyBytes @49 :UInt64 = 1073741824;
  maxParkedBytes @50 :UInt64 = 2147483648;
  replyBacklogBytes @51 :UInt64 = 268435456;
  # --partition: PartitionKind as a number (0 strided, 1 iid, 2 dirichlet, 3 shards)
  partitionKind @52 :UInt8;
  partitionAlpha @53 :Float64 = 0.5;
  partitionShards @54 :Int32 = 2;
  # --sync fedavg
  rounds @55 :Int32 = 30;
  participation @56 :Float64 = 1;
  localEpochs @57 :Int32 = 1;
  localSteps @58 :Int32;
  roundTimeoutS @59 :Float64 = 60;
  clientDropout @60 :Float64;
  proxMu @61 :Float64;
  serverLr @62 :Float64 = 1;
  # --aggregate: AggregateKind as a number (0 mean .. 5 bulyan)
  aggregateKind @63 :UInt8;
  aggregateTrim @64 :Float64;
  aggregateF @65 :Int32;
  aggregateM @66 :Int32 = 1;
  # --byzantine: AttackKind as a number (0 none .. 4 labelflip)
  byzantineRanks @67 :List(Int32);
  attackKind @68 :UInt8;
  attackSigma @69 :Float64 = 1;
  attackFactor @70 :Float64 = 1;
  histogramsOut @71 :Text;
  pullCodec @72 :UInt8;            # --compress-pull (CodecKind; 0 = none)
  pullCodecRatio @73 :Float64;
  pullCodecChunk @74 :UInt32;
  residualRows @75 :UInt64;        # --residual-rows
  pullCopyRows @76 :UInt64;        # --pull-copy-rows
  consensusStep @77 :Float64;      # --consensus-step (0: the codec's default)
  allreduceRows @78 :UInt8;        # --allreduce-rows (AllReduceRows: 0 auto, 1 dense, 2 pairs)
  minWorkers @79 :Int32;           # --min-workers (0: the sync mode's default)
  maxRestarts @80 :Int32;          # --max-restarts
  maxWorkers @81 :Int32;           # --max-workers (0: --workers, no joins)
  hiddenLayers @82 :List(Int32);   # --hidden, input side first (empty: the model's default)
  deviceKind @83 :UInt8;           # --device (DeviceKind: 0 auto, 1 cpu, 2 cuda)
  deviceIndex @84 :Int32;          # --device cuda:N
  maxTableBytes @85 :UInt64;       # --max-table-memory (0: half of each server's memory)
  maxStores @86 :Int32 = 16;       # --max-stores
  workerCommand @87 :List(Text);   # syncline-launch ... -- COMMAND (empty: syncline-worker)
  # --server-optimizer: ServerOptimizerKind as a number (0 sgd .. 4 yogi)
  serverOptimizer @88 :UInt8;
  serverMomentum @89 :Float64 = 0.9;
  serverTau @90 :Float64 = 0.001;
  secureAggregation @91 :Bool;     # --secure-aggregation
  secaggThreshold @92 :Int32;      # --secagg-threshold (0: a majority)
  # --dp: DpLevel as a number (0 off, 1 example, 2 client)
  dpLevel @93 :UInt8;
  dpClip @94 :Float64 = 1;
  dpDelta @95 :Float64 = 1e-5;
  dpNoiseMultiplier @96 :Float64;
  dpEpsilon @97 :Float64;
  dpAccountant @98 :UInt8;         # RdpConversion (0 rdp, 1 rdp-classic)
  dpNoiseSeed @99 :UInt64;
  dpExamples @100 :UInt64;
  dpKey @101 :Text;                 # 64 hex digits (privacy/dp_random.h)
  traceDir @102 :Text;             # --trace on: where each node writes its trace (empty: off)
  traceFirst @103 :Int64;          # --trace-steps A:B, the steps [A, B) traced
  traceEnd @104 :Int64;
  evalEverySteps @105 :Int64;      # --eval-every N (0: off)
  evalEverySeconds @106 :Float64;  # --eval-every Ns (0: off)
  secaggNeighbours @107 :Int32;    # --secagg-neighbours (0: every other client)
}

# Secure aggregation's messages (Bonawitz et al. 2017's rounds; privacy/secagg_protocol.h). Clients
# are numbered by worker rank + 1 (a Shamir share's x). Keys, ciphertexts and signatures are raw
# libsodium bytes (X25519 and Ed25519 keys: 32; signatures: 64).
enum SecAggStage {
  advertise @0;    # client: keys[0] = its own; answer: every advertiser's keys
  shareKeys @1;    # client: sealed = its shares for each advertiser; answer: those sealed for it
  maskedInput @2;  # client: modulusBits, quantBits, and payload 1; answer: survivors
  consistency @3;  # client: signatures[0] = its signature of (round, survivors); answer: all
  unmask @4;       # client: selfMaskShares and keyShares; answer: empty (the sum is the server's)
}

struct SecAggKeys {
  client @0 :Int32;
  encryption @1 :Data;  # X25519: shares sealed to this client
  masking @2 :Data;     # X25519: its pairwise masks
  signing @3 :Data;     # Ed25519: its consistency signature
  selfMaskCommitment @4 :Data;  # BLAKE2b of its self-mask seed, checked at unmasking
}

struct SecAggSealed {
  from @0 :Int32;
  to @1 :Int32;
  ciphertext @2 :Data;  # nonce, then XChaCha20-Poly1305 of the two shares
}

struct SecAggShare {
  peer @0 :Int32;       # whose secret this is a share of
  x @1 :UInt8;
  y @2 :Data;           # 32 bytes
}

struct SecAggSignature {
  client @0 :Int32;
  signature @1 :Data;
}

struct SecAggMessage {
  round @0 :Int64;
  keys @1 :List(SecAggKeys);
  sealed @2 :List(SecAggSealed);
  survivors @3 :List(Int32);
  signatures @4 :List(SecAggSignature);
  selfMaskShares @5 :List(SecAggShare);
  keyShares @6 :List(SecAggShare);
  modulusBits @7 :UInt8;  # masked input: the modulus the vector is reduced by (32: 2^32)
  quantBits @8 :UInt8;    # masked input: the quantisation's bits per coordinate
}
