"""Dynamixel Protocol 2.0 bus (Koch arms: XL330 / XL430)."""

from __future__ import annotations

from drivers.bus import SerialServoBus, VendorSpec
from drivers.dynamixel import tables
from drivers.dynamixel.protocol import ALERT, CODEC, CRC_ERROR, decode_error
from drivers.errors import ChecksumError, TransportError
from drivers.packets import Status


class DynamixelBus(SerialServoBus):
    spec = VendorSpec(
        codec=CODEC,
        table=tables.X_TABLE,
        ping_params=3,  # model number (2) + firmware version (1)
        load="Present_Current",
        voltage="Present_Input_Voltage",
        voltage_unit_v=tables.VOLTAGE_UNIT_V,
        model_names=tables.MODEL_NUMBERS,
    )

    def _check_transport_status(self, status: Status) -> None:
        # "CRC error" in the status means the servo got our packet damaged: a wire problem, so it is
        # retried like any transport error rather than reported as a servo fault.
        if status.error & 0x7F == CRC_ERROR:
            raise ChecksumError(
                f"servo id {status.servo_id} received a corrupted packet", servo_id=status.servo_id
            )

    def _fault_bits(self, status: Status) -> tuple[str, ...]:
        hardware = 0
        if status.error & ALERT:
            # The alert flag only says "something"; the details live in Hardware_Error_Status.
            reg = self.spec.table["Hardware_Error_Status"]
            try:
                reply = self._transact(
                    CODEC.read(status.servo_id, reg.address, reg.size),
                    (status.servo_id,),
                    reg.size,
                    what=f"read Hardware_Error_Status of id {status.servo_id}",
                    check_faults=False,
                    retries=0,
                )[0]
                hardware = reg.from_bytes(reply.params)
            except TransportError:
                pass
        return decode_error(status.error, hardware)

    def _model_number(self, servo_id: int, status: Status) -> int:
        return int.from_bytes(status.params[:2], "little")
